// The --val_split hold-out of a training set that has no validation set of its own (an image
// folder without --val_dir, tar shards without val-*.tar): a fixed shuffle of its n samples, not
// moved by --seed, so the same samples are held out on every run, of which the first
// n x fraction (at least 1, at most n - 1) are validation. Torch-free.
#pragma once

#include <cstddef>
#include <vector>

namespace ddpx::data {

struct HeldOut {
  std::vector<size_t> train;  // sample indices, sorted
  std::vector<size_t> val;    // sorted; disjoint from train, together 0..n-1
};

// n >= 2 and 0 < fraction < 1 (the callers check both, naming their flag and folder).
HeldOut hold_out(size_t n, double fraction);

}  // namespace ddpx::data
