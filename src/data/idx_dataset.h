// MNIST and Fashion-MNIST from their IDX files (raw or gzipped; the byte format is io/idx.h):
// which files make a split, and the class names.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace ddpx::data {

// Reads train-/t10k- images and labels (raw or .gz) from `dir`.
DatasetSplits load_idx_dataset(const std::string& name, const std::string& dir);

std::vector<std::string> fashion_mnist_class_names();

}  // namespace ddpx::data
