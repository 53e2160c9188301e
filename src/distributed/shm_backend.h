// ddpx's shared-memory transport (shm/) as a c10d Backend for CPU tensors on one host, and the
// group's PeerMemory (peer_memory.h). Here, beside the factories that build it, because it
// joins two subfolders that know nothing of each other: a c10d wrapper (c10d/) over the
// transport (shm/).
//
// As a c10d Backend: all-reduce (sum
// or average) of contiguous CPU float tensors, reduce-scatter into a tensor (sum or average of
// float32/float64/bfloat16/float16), all-gather into a tensor and broadcast of contiguous CPU
// tensors go through shared memory (ShmAllreduce), all-reduces in place for tensors allocated
// in its arena(); every other collective, and every call these cannot take (another dtype or
// reduce op, a non-contiguous tensor, mismatched sizes), is handed to the wrapped Gloo backend
// (ForwardingBackend), which does it or says why not. A job's
// ProcessGroup holds it for CPU tensors, beside NCCL for CUDA ones where there is a GPU, as
// PyTorch's "cpu:gloo,cuda:nccl" does.
//
// Work is asynchronous like Gloo's: allreduce() queues the tensor for this backend's
// communication thread and returns a Work that wait()s for it.
//
// Ordering: each rank issues the same sequence of collectives; the shared-memory queue and the
// Gloo backend each keep that order, so the two channels never cross.
//
// As PeerMemory: the arena is the memory a rank publishes (allocate, offset_of, peer_view), and
// submit() runs a strategy's collective steps (reduce-and-apply, gather-and-apply, barriers) on
// the communication thread, queued with the all-reduces. Context::peer_memory() offers it only
// where there is an arena.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "distributed/c10d/forwarding_backend.h"
#include "distributed/peer_memory.h"
#include "distributed/shm/shm_allreduce.h"

namespace ddpx::dist {

class ShmBackend : public ForwardingBackend, public PeerMemory {
 public:
  ShmBackend(c10::intrusive_ptr<c10d::Backend> gloo, std::unique_ptr<ShmAllreduce> shm);
  ~ShmBackend() override;

  const std::string getBackendName() const override { return "gloo+shm"; }
  // Memory that this backend all-reduces without copying (ShmArena); null when there is none.
  const std::shared_ptr<ShmArena>& arena() const { return shm_->arena(); }
  // Collectives run over shared memory so far (read it after wait()ing for them).
  int64_t shm_calls() const { return shm_->calls(); }
  // Whether all-reduces of `dtype` honour ReduceOp::AVG, averaging in the pass that sums.
  static bool averages(c10::ScalarType dtype) {
    return dtype == c10::kFloat || dtype == c10::kDouble;
  }
  // A zero-filled 1-d tensor in this rank's arena that all-reduces in place, or undefined when
  // /dev/shm is full or `dtype` is not one averages() takes.
  torch::Tensor allocate_bucket(int64_t numel, c10::ScalarType dtype) const;

  // PeerMemory over the arena (allocate: undefined without one, or without room).
  torch::Tensor allocate(int64_t numel, c10::ScalarType dtype, bool kept = false) override;
  std::optional<int64_t> offset_of(const torch::Tensor& tensor) const override;
  torch::Tensor peer_view(int rank, int64_t offset, int64_t numel,
                          c10::ScalarType dtype) const override;
  // Runs `op` on this backend's communication thread, in order with the all-reduces queued
  // before it; every rank must submit the same ops in the same order (they are collective).
  c10::intrusive_ptr<c10d::Work> submit(std::function<void(PeerSteps&)> op) override;
  std::string where() const override { return "shared memory"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;

 private:
  class ShmWork;
  void run();
  c10::intrusive_ptr<c10d::Work> enqueue(c10::intrusive_ptr<ShmWork> work);

  std::unique_ptr<ShmAllreduce> shm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ShmWork>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddpx::dist
