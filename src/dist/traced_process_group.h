// A c10d process group that records every collective in this rank's CollectiveTrace and hands
// it to the group it wraps (Gloo, or ProcessGroupShm for "gloo+shm"). The returned Work is a
// thin wrapper that marks the record done (or failed) when wait() returns (or throws).
//
// Cost per collective: one sequence number, a clock read and a few stores into the ring, plus
// one small Work allocation; no system call and no store or network I/O. Ordering, threads
// and errors are the wrapped group's: the wrapper adds no lock around it.
//
// After a collective has failed, the wrapped group is abandoned rather than destroyed: tearing
// down Gloo or the shared-memory queue would wait for every collective still queued behind the
// failed one (each up to the timeout), and the process is about to end anyway.
//
// 1.13 layout of c10d::ProcessGroup only (like ProcessGroupShm); 2.x builds are not traced.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR == 1
#define DDPX_HAVE_TRACED_GROUP 1

#include <atomic>
#include <memory>

#include "core/collective_trace.h"

namespace ddpx::dist {

class TracedProcessGroup : public c10d::ProcessGroup {
 public:
  TracedProcessGroup(std::shared_ptr<c10d::ProcessGroup> inner,
                     std::shared_ptr<trace::CollectiveTrace> trace);
  ~TracedProcessGroup() override;

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  c10d::ProcessGroup& inner() { return *inner_; }
  const std::shared_ptr<trace::CollectiveTrace>& trace() const { return trace_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
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
  friend class TracedWork;
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> traced(const char* op, c10d::OpType type,
                                        const std::vector<at::Tensor>& tensors, Call&& call);

  std::shared_ptr<c10d::ProcessGroup> inner_;
  std::shared_ptr<trace::CollectiveTrace> trace_;
  std::shared_ptr<std::atomic<bool>> failed_;  // shared with the Works, which outlive calls
};

// The Work a TracedProcessGroup returns.
class TracedWork : public c10d::Work {
 public:
  TracedWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<trace::CollectiveTrace> trace,
             std::shared_ptr<std::atomic<bool>> failed, uint64_t seq, int rank,
             c10d::OpType type);
  bool wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  const trace::CollectiveTrace& trace() const { return *trace_; }
  uint64_t seq() const { return seq_; }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  std::shared_ptr<trace::CollectiveTrace> trace_;
  std::shared_ptr<std::atomic<bool>> failed_;
  uint64_t seq_;
};

}  // namespace ddpx::dist

#endif  // TORCH_VERSION_MAJOR == 1
