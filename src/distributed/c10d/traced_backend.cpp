// Every collective recorded, then delegated (see traced_backend.h).
#include "distributed/c10d/traced_backend.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "core/env.h"
#include "core/log.h"
#include "trace/collective_report.h"

namespace ddpx::dist {

std::string explain_failure(trace::CollectiveTrace& trace) {
  trace.exchange();  // multi-node: the other nodes' records join this node's (trace_exchange.h)
  std::vector<trace::Snapshot> ranks;
  if (!trace.dir().empty()) ranks = trace::read_traces(trace.dir(), trace.world_size());
  if (ranks.empty()) {
    // Only this rank's ring: say where this rank waits and how to see the others next time.
    trace::Snapshot self = trace.snapshot();
    const trace::Entry* waiting = nullptr;
    for (const auto& e : self.entries) {
      if (e.state != trace::State::kDone) {
        waiting = &e;
        break;
      }
    }
    return fmt::format(
        "rank {} waited in {}; no record of the other ranks (under `ddpx run` "
        "they are compared; else set DDPX_TRACE_DIR to a folder the ranks of a "
        "host share)",
        trace.rank(),
        waiting ? fmt::format("seq {} ({})", waiting->seq, waiting->sig.text())
                : std::string("no collective"));
  }
  auto report = trace::make_report(std::move(ranks), trace.world_size(), trace::realtime_ns());
  // Under `ddpx run` the launcher prints the table once for the whole job.
  if (env::get_or("DDPX_TRACE_TABLE", "1") != "0" && trace.claim_report()) {
    std::string text = fmt::format("[rank {}] collectives at the failure (newest last):\n{}  {}",
                                   trace.rank(), report.table, report.verdict);
    log::write_line(stderr, text);
  }
  return report.verdict;
}
namespace {

// How long ending the job waits for the communicator's abort (ncclCommAbort can itself hang).
constexpr auto kAbortWait = std::chrono::seconds(3);

const char* dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float";
    case at::kDouble:
      return "double";
    case at::kHalf:
      return "half";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "long";
    case at::kInt:
      return "int";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

// A collective that completes after wait() returned is late (CompletionWatch): the main thread
// is not in wait() to throw, it runs on or is blocked inside CUDA. So this thread says what
// happened, as wait_work would have, aborts the communicator and ends the process.
[[noreturn]] void end_job(const std::shared_ptr<trace::CollectiveTrace>& trace,
                          const c10::intrusive_ptr<c10d::Backend>& inner,
                          std::chrono::milliseconds timeout, const CompletionWatch::Late& late) {
  std::string op = "collective";
  for (const auto& e : trace->snapshot().entries) {
    if (e.seq == late.seq) op = e.sig.text();
  }
  std::string verdict;
  try {
    verdict = explain_failure(*trace);
  } catch (const std::exception& e) {
    verdict = std::string("no collective record: ") + e.what();
  }
  const std::string what =
      late.timed_out()
          ? fmt::format(
                "did not complete within the collective timeout of {:g} s (--timeout): "
                "still running {:.1f} s after it started",
                timeout.count() / 1e3, late.waited.count() / 1e3)
          : fmt::format("failed after wait() returned: {}", late.error);
  log::write_line(stderr, fmt::format("ddpx: error [rank {}]: {} (seq {}) {}; {}", trace->rank(),
                                      op, late.seq, what, verdict));
  std::fflush(nullptr);
  // Abort on a thread of its own, waited for a bounded time: the verdict is out already.
  auto aborted = std::make_shared<std::promise<void>>();
  std::future<void> done = aborted->get_future();
  std::thread([inner, aborted] {
    try {
      inner->abort();
    } catch (...) {
    }
    aborted->set_value();
  }).detach();
  done.wait_for(kAbortWait);
  std::fflush(nullptr);
  std::_Exit(1);  // the main thread is blocked or running on; nothing there can be unwound
}

}  // namespace

TracedBackend::TracedBackend(c10::intrusive_ptr<c10d::Backend> inner,
                             std::shared_ptr<trace::CollectiveTrace> trace,
                             std::chrono::milliseconds timeout, CompletionWatch::OnLate on_late,
                             std::string group)
    : ForwardingBackend(std::move(inner)),
      trace_(std::move(trace)),
      group_(std::move(group)),
      failed_(std::make_shared<std::atomic<bool>>(false)) {
  if (!on_late) {
    on_late = [trace = trace_, inner = inner_, timeout](const CompletionWatch::Late& late) {
      end_job(trace, inner, timeout, late);
    };
  }
  watch_ = std::make_shared<CompletionWatch>(trace_, timeout, std::move(on_late));
}

TracedBackend::~TracedBackend() {
  if (failed_->load()) abandon();
}

template <typename Call>
c10::intrusive_ptr<c10d::Work> TracedBackend::traced(const char* op, c10d::OpType type,
                                                     const std::vector<at::Tensor>& tensors,
                                                     Call&& call) {
  uint64_t seq;
  const auto start = CompletionWatch::Clock::now();
  std::optional<c10::Device> device;
  if (tensors.empty() || !tensors[0].defined()) {
    seq = trace_->begin(op, "-", nullptr, 0, 0, group_.c_str());
  } else {
    const at::Tensor& t = tensors[0];
    seq =
        trace_->begin(op, dtype_name(t.scalar_type()), t.sizes().data(), static_cast<int>(t.dim()),
                      static_cast<int64_t>(tensors.size()), group_.c_str());
    device = t.device();
  }
  c10::intrusive_ptr<c10d::Work> inner;
  try {
    inner = call();
  } catch (...) {
    trace_->end(seq, false);
    failed_->store(true);
    throw;
  }
  return c10::make_intrusive<TracedWork>(std::move(inner), trace_, failed_, watch_, seq, start,
                                         device, getRank(), type);
}

c10::intrusive_ptr<c10d::Work> TracedBackend::record(
    const char* op, const std::vector<at::Tensor>& tensors,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  return traced(op, c10d::OpType::UNKNOWN, tensors, start);
}

c10::intrusive_ptr<c10d::Work> TracedBackend::broadcast(std::vector<at::Tensor>& t,
                                                        const c10d::BroadcastOptions& o) {
  return traced("broadcast", c10d::OpType::BROADCAST, t, [&] { return inner_->broadcast(t, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::allreduce(std::vector<at::Tensor>& t,
                                                        const c10d::AllreduceOptions& o) {
  return traced("allreduce", c10d::OpType::ALLREDUCE, t, [&] { return inner_->allreduce(t, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::allreduce_coalesced(
    std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) {
  return traced("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, t,
                [&] { return inner_->allreduce_coalesced(t, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::reduce(std::vector<at::Tensor>& t,
                                                     const c10d::ReduceOptions& o) {
  return traced("reduce", c10d::OpType::REDUCE, t, [&] { return inner_->reduce(t, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::allgather(std::vector<std::vector<at::Tensor>>& out,
                                                        std::vector<at::Tensor>& in,
                                                        const c10d::AllgatherOptions& o) {
  return traced("allgather", c10d::OpType::ALLGATHER, in,
                [&] { return inner_->allgather(out, in, o); });
}
// Into-tensor all-gathers and reduce-scatters record the whole (gathered or scattered)
// tensor: the logical bytes of the collective, what the sharded plans count (Ψ for a
// parameter's all-gather and for its gradient's reduce-scatter), the same on every rank.
c10::intrusive_ptr<c10d::Work> TracedBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                              const c10d::AllgatherOptions& o) {
  return traced("allgather_into_tensor", c10d::OpType::_ALLGATHER_BASE, {out},
                [&] { return inner_->_allgather_base(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& out, std::vector<at::Tensor>& in, const c10d::AllgatherOptions& o) {
  return traced("allgather_into_tensor", c10d::OpType::COALESCED, out,
                [&] { return inner_->allgather_into_tensor_coalesced(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::gather(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::GatherOptions& o) {
  return traced("gather", c10d::OpType::GATHER, in, [&] { return inner_->gather(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::scatter(std::vector<at::Tensor>& out,
                                                      std::vector<std::vector<at::Tensor>>& in,
                                                      const c10d::ScatterOptions& o) {
  return traced("scatter", c10d::OpType::SCATTER, out, [&] { return inner_->scatter(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::reduce_scatter(
    std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
    const c10d::ReduceScatterOptions& o) {
  return traced("reduce_scatter", c10d::OpType::REDUCE_SCATTER, out,
                [&] { return inner_->reduce_scatter(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::_reduce_scatter_base(
    at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) {
  return traced("reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, {in},
                [&] { return inner_->_reduce_scatter_base(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
    const c10d::ReduceScatterOptions& o) {
  return traced("reduce_scatter_tensor", c10d::OpType::COALESCED, in,
                [&] { return inner_->reduce_scatter_tensor_coalesced(out, in, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                            std::vector<int64_t>& out_splits,
                                                            std::vector<int64_t>& in_splits,
                                                            const c10d::AllToAllOptions& o) {
  return traced("alltoall", c10d::OpType::ALLTOALL_BASE, {in},
                [&] { return inner_->alltoall_base(out, in, out_splits, in_splits, o); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::send(std::vector<at::Tensor>& t, int dst, int tag) {
  return traced("send", c10d::OpType::SEND, t, [&] { return inner_->send(t, dst, tag); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::recv(std::vector<at::Tensor>& t, int src, int tag) {
  return traced("recv", c10d::OpType::RECV, t, [&] { return inner_->recv(t, src, tag); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::recvAnysource(std::vector<at::Tensor>& t, int tag) {
  return traced("recv", c10d::OpType::RECVANYSOURCE, t,
                [&] { return inner_->recvAnysource(t, tag); });
}
c10::intrusive_ptr<c10d::Work> TracedBackend::barrier(const c10d::BarrierOptions& o) {
  return traced("barrier", c10d::OpType::BARRIER, {}, [&] { return inner_->barrier(o); });
}

TracedWork::TracedWork(c10::intrusive_ptr<c10d::Work> inner,
                       std::shared_ptr<trace::CollectiveTrace> trace,
                       std::shared_ptr<std::atomic<bool>> failed,
                       std::shared_ptr<CompletionWatch> watch, uint64_t seq,
                       CompletionWatch::Clock::time_point start, std::optional<c10::Device> device,
                       int rank, c10d::OpType type)
    : c10d::Work(rank, type),
      inner_(std::move(inner)),
      trace_(std::move(trace)),
      failed_(std::move(failed)),
      watch_(std::move(watch)),
      seq_(seq),
      start_(start),
      device_(device) {}

bool TracedWork::wait(std::chrono::milliseconds timeout) {
  try {
    bool done = inner_->wait(timeout);
    if (handed_off_.load()) return done;
    // NCCL's wait() returns once the current stream is ordered after the collective: the
    // record is completed when the collective is, by the watch.
    if (watch_ && !inner_->isCompleted()) {
      if (!handed_off_.exchange(true)) watch_->add(inner_, seq_, start_, device_);
      return done;
    }
    trace_->end(seq_, true);
    return done;
  } catch (...) {
    trace_->end(seq_, false);
    failed_->store(true);
    throw;
  }
}

bool TracedWork::isCompleted() { return inner_->isCompleted(); }
bool TracedWork::isSuccess() const { return inner_->isSuccess(); }
std::exception_ptr TracedWork::exception() const { return inner_->exception(); }
int TracedWork::sourceRank() const { return inner_->sourceRank(); }
std::vector<at::Tensor> TracedWork::result() { return inner_->result(); }
void TracedWork::synchronize() { inner_->synchronize(); }
void TracedWork::blockCurrentStream() { inner_->blockCurrentStream(); }
void TracedWork::abort() { inner_->abort(); }
float TracedWork::getDuration() const { return inner_->getDuration(); }
uint64_t TracedWork::getSequencenumber() const { return inner_->getSequencenumber(); }
c10::intrusive_ptr<c10::ivalue::Future> TracedWork::getFuture() { return inner_->getFuture(); }

}  // namespace ddpx::dist
