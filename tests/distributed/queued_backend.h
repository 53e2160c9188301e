// NCCL's wait() on a CPU: a backend over a real Gloo group whose Works' wait() returns at once,
// before the collective has run, as ProcessGroupNCCL's does (it only orders the caller's CUDA
// stream after the collective; the host goes on). Completion and errors stay Gloo's, read through
// isCompleted() and exception() as they are read from an NCCL Work. With it the record and
// ddpx's own timeout of such collectives (completion_watch.h) run here, on real processes.
#pragma once

#include <chrono>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "distributed/c10d/forwarding_backend.h"
#include "distributed/c10d/traced_backend.h"
#include "distributed/factories.h"

namespace ddpx::test {

class QueuedWork : public c10d::Work {
 public:
  explicit QueuedWork(c10::intrusive_ptr<c10d::Work> inner) : inner_(std::move(inner)) {}
  bool wait(std::chrono::milliseconds) override { return true; }  // as NCCL: the host goes on
  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  std::vector<at::Tensor> result() override { return inner_->result(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
};

class QueuedBackend : public dist::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t,
                                           const c10d::AllreduceOptions& o) override {
    return c10::make_intrusive<QueuedWork>(inner_->allreduce(t, o));
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t,
                                           const c10d::BroadcastOptions& o) override {
    return c10::make_intrusive<QueuedWork>(inner_->broadcast(t, o));
  }
};

// A traced group of queued Gloo collectives. Gloo's own timeout is past ddpx's by the margin
// ddpx gives NCCL's (kInnerTimeoutMargin), so that ddpx's watch is what ends a late collective.
inline std::shared_ptr<c10d::ProcessGroup> queued_group(
    const std::shared_ptr<c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout, std::shared_ptr<trace::CollectiveTrace> trace,
    dist::CompletionWatch::OnLate on_late = {}) {
  auto gloo = dist::make_gloo_backend(store, rank, world_size, timeout + dist::kInnerTimeoutMargin,
                                      "127.0.0.1");
  auto traced =
      c10::make_intrusive<dist::TracedBackend>(c10::make_intrusive<QueuedBackend>(std::move(gloo)),
                                               std::move(trace), timeout, std::move(on_late));
  return dist::make_process_group(store, rank, world_size, std::move(traced),
                                  c10::intrusive_ptr<c10d::Backend>());
}

}  // namespace ddpx::test
