// The poller and the deadline of collectives queued past wait() (see completion_watch.h).
#include "distributed/c10d/completion_watch.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>

namespace ddpx::dist {
namespace {

std::string first_line(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

CompletionWatch::CompletionWatch(std::shared_ptr<trace::CollectiveTrace> trace,
                                 std::chrono::milliseconds timeout, OnLate on_late)
    : trace_(std::move(trace)), timeout_(timeout), on_late_(std::move(on_late)) {}

CompletionWatch::~CompletionWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (poller_.joinable()) poller_.join();
  if (deadline_.joinable()) deadline_.join();
}

void CompletionWatch::add(c10::intrusive_ptr<c10d::Work> work, uint64_t seq,
                          Clock::time_point start, std::optional<c10::Device> device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back({std::move(work), seq, start});
    if (!poller_.joinable()) {
      poller_ = std::thread([this, device] { poll_loop(device); });
      deadline_ = std::thread([this] { deadline_loop(); });
    }
  }
  wake_.notify_all();
}

void CompletionWatch::report(const Late& late) {
  if (!reported_.exchange(true) && on_late_) on_late_(late);
}

void CompletionWatch::poll_loop(std::optional<c10::Device> device) {
  std::optional<c10::DeviceGuard> guard;
  if (device && !device->is_cpu()) guard.emplace(*device);
  std::vector<Item> pending;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, kPoll, [this] { return stop_; });
      wake_.wait(lock, [this] { return stop_ || !items_.empty(); });
      if (stop_) return;
      pending = items_;
    }
    // Queried without the lock: a query may block (see the header), the deadline must not.
    std::vector<std::pair<uint64_t, std::exception_ptr>> settled;
    for (Item& item : pending) {
      try {
        if (!item.work->isCompleted()) continue;
        settled.emplace_back(item.seq, item.work->exception());
      } catch (...) {
        settled.emplace_back(item.seq, std::current_exception());
      }
    }
    pending.clear();  // drops this thread's references to the Works
    if (settled.empty()) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.erase(std::remove_if(items_.begin(), items_.end(),
                                  [&](const Item& item) {
                                    return std::any_of(
                                        settled.begin(), settled.end(),
                                        [&](const auto& s) { return s.first == item.seq; });
                                  }),
                   items_.end());
    }
    for (const auto& [seq, error] : settled) {
      trace_->end(seq, !error);
      if (error) report({seq, first_line(error), std::chrono::milliseconds(0)});
    }
  }
}

void CompletionWatch::deadline_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (items_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto oldest = std::min_element(items_.begin(), items_.end(),
                                   [](const Item& a, const Item& b) { return a.start < b.start; });
    const Clock::time_point deadline = oldest->start + timeout_;
    if (Clock::now() < deadline) {
      wake_.wait_until(lock, deadline);
      continue;
    }
    Late late{oldest->seq, "",
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - oldest->start)};
    lock.unlock();
    report(late);  // only the first lateness is reported: this thread is done
    return;
  }
}

}  // namespace ddpx::dist
