// A c10d process group for one host: all-reduce (sum or average) of contiguous CPU float
// tensors and broadcast of contiguous CPU tensors go through shared memory (ShmAllreduce),
// all-reduces in place for tensors allocated in its arena(); every other collective, and
// everything across hosts, is delegated to the wrapped Gloo group. Work is asynchronous like Gloo's: allreduce() queues
// the tensor for this group's communication thread and returns a Work that wait()s for it.
//
// Ordering: each rank issues the same sequence of collectives; the shared-memory queue and the
// Gloo group each keep that order, so the two channels never cross.
//
// c10d's class layout differs between libtorch 1.13 and 2.x: this subclass of ProcessGroup is
// the 1.13 form and is only compiled there (DDPX_HAVE_SHM_GROUP); 2.x builds use Gloo alone.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR == 1
#define DDPX_HAVE_SHM_GROUP 1

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/shm_allreduce.h"

namespace ddpx::dist {

class ProcessGroupShm : public c10d::ProcessGroup {
 public:
  ProcessGroupShm(std::shared_ptr<c10d::ProcessGroup> fallback,
                  std::unique_ptr<ShmAllreduce> shm);
  ~ProcessGroupShm() override;

  const std::string getBackendName() const override { return "gloo+shm"; }
  c10d::ProcessGroup& fallback() { return *fallback_; }
  // Memory that this group all-reduces without copying (ShmArena); null when there is none.
  const std::shared_ptr<ShmArena>& arena() const { return shm_->arena(); }
  // Rank r's arena memory at `offset` (ShmAllreduce::peer_tensor).
  torch::Tensor peer_tensor(int rank, size_t offset, int64_t numel, c10::ScalarType dtype) const {
    return shm_->peer_tensor(rank, offset, numel, dtype);
  }
  // Runs `op` on this group's communication thread, in order with the all-reduces queued
  // before it; every rank must submit the same ops in the same order (they are collective).
  c10::intrusive_ptr<c10d::Work> submit(std::function<void(ShmAllreduce&)> op);

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;

  // Everything else: Gloo.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  class ShmWork;
  void run();
  c10::intrusive_ptr<c10d::Work> enqueue(c10::intrusive_ptr<ShmWork> work);

  std::shared_ptr<c10d::ProcessGroup> fallback_;
  std::unique_ptr<ShmAllreduce> shm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ShmWork>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddpx::dist

#endif  // TORCH_VERSION_MAJOR == 1
