// The original tool's working folder, small: CIFAR-10 and CIFAR-100 written by Python's pickle
// in the official python-version layout under DIR/data (the original's ./data), and the way to
// run one of the original's commands there exactly as it prints them, shortened only through
// the environment (train/env_limits.h).
#pragma once

#include <string>

#include "support/support.h"

namespace ddpx::test {

enum class SeedData {
  kCifar100,         // data/cifar-100-python/ beside data/cifar-100-python.tar.gz
  kCifar100Archive,  // data/cifar-100-python.tar.gz alone
  kCifar10,          // data/cifar-10-batches-py/
};

// Writes `what` under dir/data: 16 training and 8 test images of 32x32x3, labels spread over
// every class index range.
void write_seed_data(const std::string& dir, SeedData what);

// One epoch of one step of 2 images per rank and one test batch, whatever the command says.
inline const char* kSeedLimits =
    "DDPX_EPOCHS=1 DDPX_MAX_STEPS=1 DDPX_BATCH_SIZE=2 DDPX_MAX_TEST_BATCHES=1";

// Runs `printed` (a line as the original prints it, starting `./run-ddp.sh ` or `ddpx `) by
// /bin/sh in `dir`, with kSeedLimits and this build's ddpx: ./run-ddp.sh is this repository's,
// `ddpx` the built binary. Nothing else of the line changes.
CommandResult run_seed_command(const std::string& dir, const std::string& printed,
                               int timeout_s = 300);

}  // namespace ddpx::test
