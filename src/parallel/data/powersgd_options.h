// PowerSGD's settings (powersgd.h), apart so that DdpOptions can hold them.
#pragma once

#include <cstdint>

namespace ddpx::parallel {

struct PowerSgdOptions {
  int64_t rank = 1;                      // R, the matrix approximation rank
  int64_t start_iter = 1000;             // plain all-reduce for this many steps first
  double min_compression_rate = 2;       // compress a matrix only when R (n + m) * this < n m
  bool warm_start = true;                // keep Q between steps
  bool error_feedback = true;            // add what compression missed to the next gradient
  uint64_t seed = 0;                     // the first Qs: the same on every rank
  double orthogonalization_epsilon = 0;  // added to norms in Gram-Schmidt (0: none)
};

}  // namespace ddpx::parallel
