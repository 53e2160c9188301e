// Communication buffers a sharded plan reuses from step to step: each unit's all-gather output
// and reduce-scatter input (the whole unit, world_size shards) are taken from here and given
// back when the collective is done, instead of being allocated per call. A fresh multi-MiB
// allocation is fresh pages, each faulted in and zeroed by the kernel: on a CPU that costs as
// much as the copy itself. And where the process group has peer memory, the buffers lie in
// the memory this rank publishes (dist::BucketPolicy::allocate), so a reduce-scatter reads its
// peers' inputs in place, without staging them through the transport's own buffers.
//
// The pool holds at most as many buffers as were ever in use at once (two reduce-scatters and
// two all-gathers in flight: a few times the largest unit), each the size of the largest
// request it served. Not thread-safe: the plan's thread only.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ddpx::parallel {

class ScratchPool {
 public:
  // `allocate`: memory the group reduces in place (BucketPolicy::allocate; may be empty or
  // return undefined, then ordinary memory).
  using Allocate = std::function<torch::Tensor(int64_t numel, c10::ScalarType dtype)>;
  explicit ScratchPool(Allocate allocate = {}) : allocate_(std::move(allocate)) {}

  // A contiguous 1-d tensor of `numel` elements of `dtype` on `device`, over memory no other
  // acquired tensor uses until it is given back. Its contents are whatever was left there.
  // Only CPU tensors are pooled; others are allocated as usual.
  torch::Tensor acquire(int64_t numel, c10::ScalarType dtype, c10::Device device);
  // Gives `tensor` (from acquire(); undefined: nothing) back for reuse.
  void release(const torch::Tensor& tensor);

  int64_t bytes() const;  // held, in use or not
  size_t buffers() const { return buffers_.size(); }

 private:
  struct Buffer {
    torch::Tensor bytes;  // kByte, 1-d
    bool busy = false;
  };
  torch::Tensor make(int64_t nbytes) const;

  Allocate allocate_;
  std::vector<Buffer> buffers_;
};

}  // namespace ddpx::parallel
