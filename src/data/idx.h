// The IDX format of MNIST and Fashion-MNIST: a big-endian header (magic 0x0000080D where D is
// the number of dimensions, then D uint32 sizes) followed by uint8 data. Files may be gzipped.
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>

#include "data/dataset.h"

namespace ddpx::data {

// In-memory parsers (also the fuzz entry points). `source` names the bytes in errors.
torch::Tensor parse_idx_images(std::string_view bytes, const std::string& source);  // (N,H,W,1)
torch::Tensor parse_idx_labels(std::string_view bytes, const std::string& source,
                               int64_t num_classes);  // (N) int64

// Reads train-/t10k- images and labels (raw or .gz) from `dir`.
DatasetSplits load_idx_dataset(const std::string& name, const std::string& dir);

std::vector<std::string> fashion_mnist_class_names();

}  // namespace ddpx::data
