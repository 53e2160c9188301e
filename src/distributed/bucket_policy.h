// How a process group wants gradient buckets: where they live and whether it averages as it sums.
// The group knows (Context::bucket_policy()); data-parallel plans ask (parallel/data/ddp.h).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace ddpx::dist {

// Where gradient buckets live and how the group reduces them (Context::bucket_policy() gives
// the one that fits what init() built). The default: ordinary memory, a SUM all-reduce, then a
// division by the world size.
struct BucketPolicy {
  // Memory for a flat CPU bucket of `numel` elements of `dtype` that the group reduces without
  // a copy (the shared-memory transport's arena), or undefined for ordinary memory.
  std::function<torch::Tensor(int64_t numel, c10::ScalarType dtype)> allocate;
  // Whether the group all-reduces `dtype` tensors on `device` with ReduceOp::AVG, averaging in
  // the pass that sums. The same answer on every rank.
  std::function<bool(c10::ScalarType dtype, c10::DeviceType device)> averages;
};

}  // namespace ddpx::dist
