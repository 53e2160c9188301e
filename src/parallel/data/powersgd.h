// PowerSGD gradient compression (Vogels et al., 2019) as a DDP comm hook, in the manner of
// PyTorch's torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.
//
// Each bucket's gradients are viewed as matrices (first dimension by the rest). One whose rank-R
// factors are at least min_compression_rate times smaller than it is sent as two thin factors,
// P = M Q (orthogonalized after the all-reduce) and Q = M^T P, and decompressed as P Q^T / N;
// matrices of one shape are batched, and 1-D tensors and matrices too small to gain are
// all-reduced as they are, in one flat tensor. Q is kept from step to step (warm start); the
// part of each rank's gradient the approximation missed is added to its next gradient (error
// feedback), so nothing is lost over time. For the first start_iter steps every bucket is
// plainly averaged.
//
// Collectives per compressed bucket: the uncompressed tensors and P are all-reduced while
// backward runs; Q, which needs P's sum, when the bucket's work is waited for (DDP's finalize,
// in bucket order on every rank). Bytes a step: 4 (R (n + m)) per n x m matrix, plus the rest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "parallel/data/ddp.h"
#include "parallel/data/powersgd_options.h"

namespace ddpx::parallel {

// What compressing a set of gradients sends: elements before and after, per step.
struct PowerSgdTraffic {
  int64_t numel_before = 0;
  int64_t numel_after = 0;
  int64_t error_feedback_bytes = 0;  // the memory the error feedback holds
  double ratio() const {
    return numel_after > 0 ? static_cast<double>(numel_before) / numel_after : 1.0;
  }
};

// The traffic for `params` (their gradients), computed from their shapes alone: the figure
// printed at start, the same that the hook then sends after start_iter.
PowerSgdTraffic powersgd_traffic(const std::vector<torch::Tensor>& params,
                                 const PowerSgdOptions& options);

// Refuses, before any collective, options under which no gradient of `params` would compress
// (the rank too large for every matrix, or no matrix at all), naming the largest rank that
// would compress one; `what` names the model in the message.
void check_powersgd(const std::vector<torch::Tensor>& params, const PowerSgdOptions& options,
                    const std::string& what);

// "PowerSGD rank R from step K: 87.3x less gradient traffic (11.2M -> 128.0K elements a step),
// error feedback 44.7 MB", for the start-up line.
std::string describe_powersgd(const PowerSgdOptions& options, const PowerSgdTraffic& traffic);

class PowerSgd : public std::enable_shared_from_this<PowerSgd> {
 public:
  // Checks the options (rank >= 1, start_iter >= 0, rate > 0), naming the flags.
  PowerSgd(std::shared_ptr<c10d::ProcessGroup> group, PowerSgdOptions options);

  // The hook for DistributedDataParallel::register_comm_hook; it keeps this object alive.
  CommHookFn hook();
  c10::intrusive_ptr<c10d::Work> reduce(const GradBucket& bucket);

  int64_t iteration() const { return iteration_; }
  // What the last compressed step's approximation missed of this rank's gradient in bucket
  // `index`, added to its next one; undefined before that bucket's first compressed step.
  torch::Tensor error_feedback(size_t index) const;
  const PowerSgdOptions& options() const { return options_; }

 private:
  struct BucketState {
    int64_t numel = 0;    // the layout this state was made for (buckets are rebuilt once)
    torch::Tensor error;  // flat, as the bucket's buffer
    torch::Tensor p, q;   // flat memory for every compressed matrix's P and Q
  };
  friend class PowerSgdWork;

  std::shared_ptr<c10d::ProcessGroup> group_;
  PowerSgdOptions options_;
  int64_t iteration_ = 0;
  uint64_t draws_ = 0;  // random Q initializations so far (the seed's offset)
  std::map<size_t, BucketState> state_;
};

}  // namespace ddpx::parallel
