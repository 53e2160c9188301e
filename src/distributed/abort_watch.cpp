#include "distributed/abort_watch.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/env.h"
#include "core/log.h"

namespace ddpx::dist {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(200);

std::string abort_key() { return "ddpx/abort/" + env::get_or("DDPX_RESTART_COUNT", "0"); }

[[noreturn]] void end_rank(int rank, const std::string& why) {
  log::write_line(stderr, fmt::format("ddpx: error [rank {}]: {}", rank, why));
  std::fflush(nullptr);
  std::_Exit(1);  // the main thread is blocked inside libtorch; nothing there can be unwound
}

}  // namespace

AbortWatch::AbortWatch(const std::shared_ptr<c10d::Store>& store, int rank) {
  c10::intrusive_ptr<c10d::Store> clone;
  try {
    clone = store->clone();
  } catch (const std::exception&) {
    return;  // FileStore: single-node jobs, whose launcher stops every rank anyway
  }
  thread_ = std::thread([this, clone, rank] {
    const std::string key = abort_key();
    while (!stop_.load()) {
      std::string message;
      try {
        if (clone->check({key})) {
          std::vector<uint8_t> bytes = clone->get(key);
          message = std::string(bytes.begin(), bytes.end());
        }
      } catch (const std::exception& e) {
        if (stop_.load()) return;
        end_rank(rank,
                 fmt::format("the rendezvous store went away while the process group "
                             "formed (did rank 0 exit?): {}",
                             std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
      }
      if (!message.empty() && !stop_.load()) end_rank(rank, message);
      std::this_thread::sleep_for(kPoll);
    }
  });
}

void AbortWatch::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void AbortWatch::announce(c10d::Store& store, int rank, const std::string& message) {
  std::string first = message.substr(0, message.find('\n'));
  std::string text = fmt::format(
      "rank {} failed while the process group formed, so this rank "
      "stops too: {}",
      rank, first);
  try {
    store.set(abort_key(), std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
    // The store is gone too; the others' watchers notice that.
  }
}

}  // namespace ddpx::dist
