#include "distributed/trace_exchange.h"

#include <chrono>
#include <future>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/env.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

using Clock = std::chrono::steady_clock;
// Ranks fail within moments of each other when a peer dies (connection reset) or together at
// the same timeout; waiting longer would only delay the job's exit.
constexpr auto kExchangeWait = std::chrono::seconds(3);
constexpr auto kPoll = std::chrono::milliseconds(100);

std::string key(int rank) {
  return "ddpx/trace/" + env::get_or("DDPX_RESTART_COUNT", "0") + "/" + std::to_string(rank);
}

void exchange(const std::shared_ptr<c10d::Store>& store, const std::string& dir, int rank,
              int world_size, const std::string& mine, Clock::time_point deadline) {
  store->set(key(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  // The ranks of this node are in dir already; wait for the others'.
  std::vector<int> pending;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && !trace::read_trace(dir, r)) pending.push_back(r);
  }
  while (!pending.empty() && Clock::now() < deadline) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (store->check({key(*it)})) {
        std::vector<uint8_t> bytes = store->get(key(*it));
        trace::write_remote_trace(dir, *it, std::string(bytes.begin(), bytes.end()));
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (!pending.empty()) std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

void install_trace_exchange(trace::CollectiveTrace& trace, std::shared_ptr<c10d::Store> store) {
  if (trace.dir().empty() || !store) return;
  std::string dir = trace.dir();
  int rank = trace.rank(), world_size = trace.world_size();
  trace.set_exchange([store, dir, rank, world_size](const std::string& mine) {
    auto deadline = Clock::now() + kExchangeWait;
    // On its own thread: a store whose host is gone may block a call for the store's timeout.
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([=] {
      try {
        exchange(store, dir, rank, world_size, mine, deadline);
      } catch (const std::exception&) {
        // The store is gone (rank 0's host died): this node's records are all there is.
      }
      done->set_value();
    }).detach();
    finished.wait_until(deadline + kPoll);
  });
}

}  // namespace ddpx::dist
