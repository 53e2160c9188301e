// The join step (see rendezvous.h).
#include "distributed/rendezvous.h"

#include <atomic>
#include <future>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "core/error.h"

namespace ddpx::dist {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(20);
const std::string kPrefix = "ddpx/join/";

std::string key(int rank) { return kPrefix + std::to_string(rank); }

std::string first_line(const std::exception& e) {
  std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

std::string to_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

void join_rendezvous(c10d::Store& store, const WorldInfo& world, std::chrono::milliseconds timeout,
                     const std::string& where) {
  const int rank = world.rank;
  const int size = world.world_size;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  try {
    const int64_t arrived = store.add(kPrefix + "count", 1);
    const std::string mine = std::to_string(size);
    store.set(key(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    DDPX_CHECK(
        arrived <= size, ErrorKind::kDist,
        "rank {}: the rendezvous at {} already holds a job ({} ranks joined, WORLD_SIZE={}): "
        "another job, or a stale one, is serving that port; stop it (ss -ltnp shows who "
        "listens) or give this job another MASTER_PORT",
        rank, where, arrived - 1, size);
    while (!store.check(keys)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < size; ++r) {
          if (!store.check({key(r)})) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        }
        fail(ErrorKind::kDist,
             "rank {}: rank(s) {} of WORLD_SIZE={} did not join the rendezvous at {} within "
             "{} ms; start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT, "
             "check that the missing ranks were started and did not fail (their logs), or raise "
             "--timeout",
             rank, missing, size, where, timeout.count());
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    for (int r = 0; r < size; ++r) {
      const std::string theirs = to_string(store.get(key(r)));
      DDPX_CHECK(theirs == mine, ErrorKind::kDist,
                 "rank {} was started with WORLD_SIZE={} but rank {} with WORLD_SIZE={}; start "
                 "every rank of a job with the same WORLD_SIZE",
                 r, theirs, rank, size);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist,
         "rank {}: lost the rendezvous at {} while waiting for WORLD_SIZE={} ranks ({}); rank 0, "
         "which hosts it, probably gave up or died: check its log, and that every rank uses the "
         "same WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
         rank, where, size, first_line(e));
  }
}

std::shared_ptr<c10d::Store> rendezvous_with_deadline(
    const std::function<std::shared_ptr<c10d::Store>()>& make_store, const WorldInfo& world,
    std::chrono::milliseconds timeout, const std::string& where) {
  using Clock = std::chrono::steady_clock;
  auto result = std::make_shared<std::promise<std::shared_ptr<c10d::Store>>>();
  auto done = result->get_future();
  const auto deadline = Clock::now() + timeout;
  auto connected = std::make_shared<std::atomic<bool>>(false);
  std::thread([result, make_store, world, timeout, where, deadline, connected] {
    try {
      auto store = make_store();
      connected->store(true);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      join_rendezvous(*store, world, std::max(left, std::chrono::milliseconds(100)), where);
      result->set_value(std::move(store));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (done.wait_for(timeout + kDeadlineMargin) == std::future_status::ready) return done.get();
  // Still connecting: nothing answered at all (no route, a host that is down, a port nobody
  // listens on), which is not the same as a listener that is not ours.
  DDPX_CHECK(connected->load(), ErrorKind::kDist,
             "rank {}: could not reach the rendezvous at {} within {} ms; check that rank 0 runs, "
             "that MASTER_ADDR and MASTER_PORT point at it and that the port is reachable from "
             "this host (WORLD_SIZE={})",
             world.rank, where, timeout.count(), world.world_size);
  fail(ErrorKind::kDist,
       "rank {}: the rendezvous at {} accepted the connection but did not answer within {} ms: "
       "the program listening there is not this job's rendezvous (another service, or a hung "
       "job); stop it (ss -ltnp shows who listens) or set MASTER_PORT to the port rank 0 of "
       "this job uses (WORLD_SIZE={})",
       world.rank, where, timeout.count(), world.world_size);
}

}  // namespace ddpx::dist
