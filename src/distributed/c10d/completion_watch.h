// Completion of collectives whose Work::wait() returns before the collective has run: NCCL's
// wait() only orders the caller's CUDA stream after the collective, and then the host goes on
// (and later blocks inside CUDA, where no error reaches it). TracedWork hands such a Work here.
// The watch marks its record done (or failed) when the Work really completes, and when it fails
// or is still pending `timeout` after it started, calls `on_late` once: in a job, ddpx's verdict
// and the end of the process (TracedBackend), well before PyTorch's own watchdog would abort it.
//
// Two threads, started by the first add() (a backend whose works complete in wait(), Gloo or
// shared memory, never starts them): a poller that asks each Work isCompleted() every kPoll,
// and a deadline thread that looks only at the clock and at what the poller settled. The split
// is for NCCL: cudaEventQuery can block while another thread holds the CUDA context (a host
// blocked in a stream sync behind the hung collective), and the deadline must pass all the same.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "trace/collective_trace.h"

namespace ddpx::dist {

class CompletionWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // How often the poller asks: the record's end time of such a collective is late by at most
  // this, and the poller costs a few cudaEventQuery calls per tick while collectives are queued.
  static constexpr auto kPoll = std::chrono::milliseconds(5);

  // What on_late is told: collective `seq` failed (`error`: the first line of its exception) or
  // is still pending after `waited` (error empty).
  struct Late {
    uint64_t seq = 0;
    std::string error;
    std::chrono::milliseconds waited{0};
    bool timed_out() const { return error.empty(); }
  };
  using OnLate = std::function<void(const Late&)>;

  CompletionWatch(std::shared_ptr<trace::CollectiveTrace> trace, std::chrono::milliseconds timeout,
                  OnLate on_late);
  ~CompletionWatch();  // stops both threads; Works still pending are left as they are
  CompletionWatch(const CompletionWatch&) = delete;
  CompletionWatch& operator=(const CompletionWatch&) = delete;

  // Watches `work`, the collective recorded as `seq`, begun at `start`. `device`: where its
  // tensors are (a CUDA device is made current on the poller, so its queries create no context
  // on another GPU).
  void add(c10::intrusive_ptr<c10d::Work> work, uint64_t seq, Clock::time_point start,
           std::optional<c10::Device> device);

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Item {
    c10::intrusive_ptr<c10d::Work> work;
    uint64_t seq;
    Clock::time_point start;
  };
  void poll_loop(std::optional<c10::Device> device);
  void deadline_loop();
  void report(const Late& late);  // calls on_late_ once

  std::shared_ptr<trace::CollectiveTrace> trace_;
  std::chrono::milliseconds timeout_;
  OnLate on_late_;
  std::mutex mutex_;
  std::condition_variable wake_;  // an add, or stop
  std::vector<Item> items_;       // pending, in the order added
  bool stop_ = false;
  std::atomic<bool> reported_{false};
  std::thread poller_, deadline_;
};

}  // namespace ddpx::dist
