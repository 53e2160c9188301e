// WebP through libwebp (optional: built where Debian's libwebp-dev is installed, else
// src/absent/webp.cpp refuses WebP files with a line saying how to get it): lossy and lossless,
// with or without alpha, to 8-bit RGB as PIL's convert("RGB") does (alpha dropped, not
// composited; libwebp's default fancy upsampling of the chroma, as PIL decodes). Animated WebP
// is refused. Every failure is one ddpx::Error(kData) naming `source`.
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>

#include "io/image.h"

namespace ddpx::io {

// Whether this build decodes WebP (libwebp was found when it was configured).
bool webp_available();

ImageInfo read_webp_info(std::string_view bytes, const std::string& source, int64_t max_pixels);
torch::Tensor decode_webp(std::string_view bytes, const std::string& source, int64_t max_pixels);

}  // namespace ddpx::io
