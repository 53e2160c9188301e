// DistributedDataParallel for any torch::nn::Module, in the manner of PyTorch's DDP.
//
// Contract: construct it on every rank with the same model (same parameter shapes, in the
// same order). The constructor broadcasts parameters and buffers from rank 0 and fails with
// ddpx::Error(kDist) naming the first mismatched parameter. forward() optionally broadcasts
// buffers from rank 0, then runs the module. During backward, gradients are averaged across
// ranks in buckets launched asynchronously as each bucket fills, overlapping communication
// with the rest of backward; when backward() returns, every parameter's .grad holds the
// average over ranks (unless a comm hook does otherwise). Inside a no_sync() scope gradients
// accumulate locally only.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "distributed/bucket_policy.h"
#include "distributed/choices.h"
#include "parallel/data/powersgd_options.h"

namespace ddpx::dist {
class Context;
}  // namespace ddpx::dist

namespace ddpx::parallel {
class Reducer;

// A full gradient bucket, as a comm hook sees it.
struct GradBucket {
  size_t index = 0;                   // launch order in this backward, the same on every rank
  torch::Tensor buffer;               // flat; each parameter's .grad is a slice of it
  std::vector<torch::Tensor> params;  // the parameters in it, in buffer order
  std::vector<int64_t> offsets;       // where each one's gradient starts in buffer (elements)
  bool last = false;                  // the last bucket of this backward
};
// Takes over a bucket's reduction: called on the backward thread as each bucket fills (in bucket
// order), it returns the work that backward() waits for before returning; .grad then holds
// whatever the hook left in the buffer. As PyTorch's DDP.register_comm_hook.
using CommHookFn = std::function<c10::intrusive_ptr<c10d::Work>(const GradBucket&)>;

struct DdpOptions {
  bool broadcast_buffers = true;
  int64_t first_bucket_bytes = int64_t{1} << 20;  // kFirstBucketBytes in PyTorch
  int64_t bucket_bytes = int64_t{25} << 20;       // bucket_cap_mb = 25
  bool find_unused_parameters = false;
  dist::CommHook comm_hook = dist::CommHook::kAllreduce;
  PowerSgdOptions powersgd;  // with comm_hook kPowerSgd (powersgd.h)
  dist::BucketPolicy buckets;
};

class DistributedDataParallel {
 public:
  // A null `group` (world size 1) makes a plain wrapper: forward() runs the module, nothing
  // is communicated.
  DistributedDataParallel(torch::nn::AnyModule module, std::shared_ptr<c10d::ProcessGroup> group,
                          DdpOptions options = {});
  // The job's group, with the buckets where the context's transport reduces them in place
  // (Context::bucket_policy()) unless options.buckets says otherwise.
  DistributedDataParallel(torch::nn::AnyModule module, const dist::Context& context,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  template <typename... Args>
  torch::Tensor forward(Args&&... args) {
    pre_forward();
    return module_.forward(std::forward<Args>(args)...);
  }

  torch::nn::Module& module() { return *module_.ptr(); }
  // Parameter indices (into module().parameters() that require grad) per gradient bucket, in
  // launch order; empty on a single process.
  std::vector<std::vector<size_t>> buckets() const;
  std::shared_ptr<torch::nn::Module> module_ptr() { return module_.ptr(); }
  // Replaces options.comm_hook for every bucket from the next backward on; no effect on a
  // single process (nothing is reduced).
  void register_comm_hook(CommHookFn hook);
  bool distributed() const { return reducer_ != nullptr; }

  // Gradient accumulation: inside the guard's lifetime backward() does not communicate.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

 private:
  void pre_forward();

  torch::nn::AnyModule module_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool require_sync_ = true;
};

}  // namespace ddpx::parallel
