// An nccl-tests style all-reduce benchmark, run under `ddpx run N -- bench allreduce`.
// Every rank fills its buffer with rank + 1 so the result is known (n(n+1)/2) and #wrong
// counts elements that differ. busbw = algbw * 2(n-1)/n, as nccl-tests defines it.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/choices.h"

namespace ddpx::bench {

struct AllreduceOptions {
  int64_t min_bytes = int64_t{1} << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t step_factor = 2;
  int64_t iterations = 0;  // 0: chosen per size (more for small sizes)
  int64_t warmup = 2;
  std::string dtype = "float32";  // float32 | float64
  dist::BackendChoice backend = dist::BackendChoice::kAuto;
  dist::Transport transport = dist::Transport::kAuto;
  // ordinary: a plain tensor (what a user's all-reduce passes). shared: allocated where DDP
  // puts its gradient buckets (the group's shared memory with --transport shm), reduced in
  // place without copies.
  std::string buffer = "ordinary";
  double timeout_s = 300;
  // Where the buffers live: auto is the GPU when one is visible (then NCCL, as nccl-tests).
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;
};

// Prints the table on rank 0; returns the average bus bandwidth in GB/s (on every rank).
double run_allreduce(const AllreduceOptions& options);

}  // namespace ddpx::bench
