// DistributedDataParallel for any torch::nn::Module, in the manner of PyTorch's DDP.
//
// Contract: construct it on every rank with the same model (same parameter shapes, in the
// same order). The constructor broadcasts parameters and buffers from rank 0 and fails with
// ddpx::Error(kDist) naming the first mismatched parameter. forward() optionally broadcasts
// buffers from rank 0, then runs the module. During backward, gradients are averaged across
// ranks in buckets launched asynchronously as each bucket fills, overlapping communication
// with the rest of backward; when backward() returns, every parameter's .grad holds the
// average over ranks. Inside a no_sync() scope gradients accumulate locally only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

namespace c10d {
class ProcessGroup;
}

namespace ddpx::dist {

class Reducer;

// How a full bucket is reduced: allreduce (average in the gradients' dtype), or fp16 / bf16
// compression (divide by the world size, cast, all-reduce, cast back when backward ends).
enum class CommHook { kAllreduce, kFp16Compress, kBf16Compress };

struct DdpOptions {
  bool broadcast_buffers = true;
  int64_t first_bucket_bytes = int64_t{1} << 20;   // kFirstBucketBytes in PyTorch
  int64_t bucket_bytes = int64_t{25} << 20;        // bucket_cap_mb = 25
  bool find_unused_parameters = false;
  CommHook comm_hook = CommHook::kAllreduce;
};

class DistributedDataParallel {
 public:
  // A null `group` (world size 1) makes a plain wrapper: forward() runs the module, nothing
  // is communicated.
  DistributedDataParallel(torch::nn::AnyModule module, std::shared_ptr<c10d::ProcessGroup> group,
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

}  // namespace ddpx::dist
