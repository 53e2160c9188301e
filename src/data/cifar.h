// CIFAR-10 and CIFAR-100 data sets in both official layouts, the "python version" and the
// "binary version" (their bytes are io/cifar.h's): which folder and files make each split, and
// the class names. When no unpacked folder is found but the official archive is in data_dir,
// it is unpacked first.
#pragma once

#include <string>

#include "data/dataset.h"

namespace ddpx::data {

// name: "cifar10" or "cifar100"; dir: the data_dir holding the folder or archive.
DatasetSplits load_cifar_dataset(const std::string& name, const std::string& dir);

// Does `dir` hold the set: its batches, an unpacked folder or an official archive?
bool holds_cifar(const std::string& name, const std::string& dir);

}  // namespace ddpx::data
