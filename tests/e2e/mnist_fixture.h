// A small MNIST in the official layout, written by Python (gzip, struct), for the download and
// `data info` tests: the four idx .gz files a mirror serves.
#pragma once

#include <string>

#include "support/support.h"

namespace ddpx::test {

// The four files of the official layout, in the order a download fetches them.
inline const char* const kMnistFiles[4] = {
    "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz"};

// Writes a 20-image train and 10-image test MNIST in the official layout into `dir`, an
// md5sum-format MD5SUMS beside it, and `stats` with the train pixels' mean and std (in [0, 1]).
void write_small_mnist(const std::string& dir);

}  // namespace ddpx::test
