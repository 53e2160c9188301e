// CIFAR-10 and CIFAR-100 in both official layouts: the "python version" (pickled dicts with a
// 10000x3072 uint8 array, CHW per row) and the "binary version" (records of label byte(s) +
// 3072 bytes). Images come out as (N, 32, 32, 3). When no unpacked folder is found but the
// official archive is in data_dir, it is unpacked first.
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>

#include "data/dataset.h"

namespace ddpx::data {

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarImageBytes = 3 * kCifarSide * kCifarSide;

// In-memory parsers (also the fuzz entry points). `fine` selects CIFAR-100 (coarse + fine
// label bytes, training on the fine label); otherwise CIFAR-10 (one label byte).
Dataset parse_cifar_binary(std::string_view bytes, const std::string& source, bool cifar100);
Dataset parse_cifar_python(std::string_view bytes, const std::string& source, bool cifar100);

// name: "cifar10" or "cifar100"; dir: the data_dir holding the folder or archive.
DatasetSplits load_cifar_dataset(const std::string& name, const std::string& dir);

}  // namespace ddpx::data
