// The first layers of a model, chosen by `--stem`: torchvision's ImageNet stem, or the small-image
// stem (3x3 stride-1 convolution, no max-pool) used for 28-32 px inputs. Only the resnet family
// has both (ModelInfo::has_cifar_stem). Torch-free, so cli/ parses the flag with kStemNames.
#pragma once

#include <string>
#include <string_view>

#include "core/error.h"
#include "core/names.h"

namespace ddpx::models {

enum class Stem { kImagenet, kCifar };

inline constexpr NameTable<Stem, 2> kStemNames{
    {{Stem::kImagenet, "imagenet"}, {Stem::kCifar, "cifar"}}};
inline const char* name(Stem stem) { return name_of(kStemNames, stem); }

// The stem named `text`; throws ddpx::Error(kUsage) naming `what` (the flag or file field that
// held it) and the choices. For names read from outside (a checkpoint's metadata) and for
// callers whose options still hold the name as a string.
inline Stem stem_from_name(std::string_view text, std::string_view what) {
  if (auto stem = parse_name(kStemNames, text)) return *stem;
  fail(ErrorKind::kUsage, "{} '{}' is not one of {}", what, text, list_names(kStemNames));
}

}  // namespace ddpx::models
