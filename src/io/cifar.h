// The bytes of CIFAR-10 and CIFAR-100 batch files in both official layouts: the "python
// version" (a pickled dict with a (N, 3072) uint8 array, CHW per row, and a list of labels; read
// by io/pickle) and the "binary version" (records of label byte(s) + 3072 pixel bytes). Every
// size and label is checked; images come out as (N, 32, 32, 3).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace ddpx::io {

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarImageBytes = 3 * kCifarSide * kCifarSide;

struct CifarBatch {
  torch::Tensor images;  // (N, 32, 32, 3) uint8
  torch::Tensor labels;  // (N) int64, each in [0, num_classes)
  int64_t num_classes = 0;
};

// In-memory parsers (also the fuzz entry points); `source` names the bytes in errors.
// `cifar100` selects CIFAR-100 (coarse + fine label bytes, the fine label is kept; the pickle's
// 'fine_labels'); otherwise CIFAR-10 (one label byte; 'labels').
CifarBatch parse_cifar_binary(std::string_view bytes, const std::string& source, bool cifar100);
CifarBatch parse_cifar_python(std::string_view bytes, const std::string& source, bool cifar100);

}  // namespace ddpx::io
