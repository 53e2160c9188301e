// A c10d Backend that records every collective in this rank's CollectiveTrace and hands it to
// the backend it wraps (Gloo, NCCL/RCCL, or the shared-memory transport's). The returned Work is a
// thin wrapper that marks the record done (or failed) when the collective has run: when wait()
// returns (or throws) for a Work that completes in wait() (Gloo, shared memory); for one whose
// wait() returns while it still runs (NCCL: wait() only orders the current CUDA stream after it),
// when the Work reports completion to the CompletionWatch (completion_watch.h). So a hung NCCL
// collective stays "pending" in the record, and ddpx's watch ends the job with the verdict when it
// is still pending `timeout` after it started, or fails: the one-line error, the table (unless the
// launcher prints it), the communicator aborted, exit code 1. ddpx wraps every backend of a
// job's group with one, so a stalled rank shows up in the hang table whichever device the
// collective ran on.
//
// Cost per collective: one sequence number, a clock read and a few stores into the ring, plus
// one small Work allocation; no system call and no store or network I/O. A Work still running
// after wait() also costs a push into the watch's list, and the watch's poller a query every
// CompletionWatch::kPoll while such Works are pending. Ordering, threads and errors are the
// wrapped backend's: the wrapper adds no lock around it.
//
// After a collective has failed, the wrapped backend is abandoned rather than destroyed
// (ForwardingBackend::abandon): the process is about to end anyway.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "distributed/c10d/completion_watch.h"
#include "distributed/c10d/forwarding_backend.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {

// The wrapped backend's own timeout where ddpx watches completion (NCCL): PyTorch's watchdog
// ends the process with SIGABRT and no verdict, so it must come after ddpx's.
constexpr auto kInnerTimeoutMargin = std::chrono::seconds(30);

class TracedBackend : public ForwardingBackend {
 public:
  // `timeout`: how long a collective may stay pending after its wait() returned (the job's
  // --timeout). `on_late`: what to do then, or when such a collective fails; by default the
  // verdict and the end of the process (end_job). `group`: the name each record carries
  // (trace::Entry::group): a sub-group's, empty for the job's group.
  TracedBackend(c10::intrusive_ptr<c10d::Backend> inner,
                std::shared_ptr<trace::CollectiveTrace> trace, std::chrono::milliseconds timeout,
                CompletionWatch::OnLate on_late = {}, std::string group = {});
  ~TracedBackend() override;

  const std::shared_ptr<trace::CollectiveTrace>& trace() const { return trace_; }

  // Records a collective that the wrapped backend runs outside c10d's calls (a transport's
  // collective steps, PeerMemory::submit: the sharded SGD step's reduce-and-apply in backward,
  // its barriers) as `op` with `tensors`' signature; `start` issues it. Without this a rank stopped
  // in such a step left no trace of it, and the hang verdict had nothing to compare.
  c10::intrusive_ptr<c10d::Work> record(
      const char* op, const std::vector<at::Tensor>& tensors,
      const std::function<c10::intrusive_ptr<c10d::Work>()>& start);

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
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
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
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> traced(const char* op, c10d::OpType type,
                                        const std::vector<at::Tensor>& tensors, Call&& call);

  std::shared_ptr<trace::CollectiveTrace> trace_;
  std::string group_;
  std::shared_ptr<std::atomic<bool>> failed_;  // shared with the Works, which outlive calls
  std::shared_ptr<CompletionWatch> watch_;     // likewise
};

// The verdict on a failed collective from every rank's record (collective_report.h); also
// prints the table to stderr once per rank unless DDPX_TRACE_TABLE=0 (the launcher prints it).
std::string explain_failure(trace::CollectiveTrace& trace);

// The Work a TracedBackend returns.
class TracedWork : public c10d::Work {
 public:
  TracedWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<trace::CollectiveTrace> trace,
             std::shared_ptr<std::atomic<bool>> failed, std::shared_ptr<CompletionWatch> watch,
             uint64_t seq, CompletionWatch::Clock::time_point start,
             std::optional<c10::Device> device, int rank, c10d::OpType type);
  bool wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  void blockCurrentStream() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  float getDuration() const override;
  uint64_t getSequencenumber() const override;

  const trace::CollectiveTrace& trace() const { return *trace_; }
  uint64_t seq() const { return seq_; }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  std::shared_ptr<trace::CollectiveTrace> trace_;
  std::shared_ptr<std::atomic<bool>> failed_;
  std::shared_ptr<CompletionWatch> watch_;
  uint64_t seq_;
  CompletionWatch::Clock::time_point start_;
  std::optional<c10::Device> device_;
  std::atomic<bool> handed_off_{false};  // given to the watch (a second wait() leaves it there)
};

}  // namespace ddpx::dist
