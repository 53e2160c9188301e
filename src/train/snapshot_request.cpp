#include "train/snapshot_request.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/error.h"

namespace ddpx::train {
namespace {

// How many requests of each kind this process was sent (never reset).
std::atomic<int> g_snapshots{0};
std::atomic<int> g_stops{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

void on_signal(int signal) { (signal == SIGUSR2 ? g_stops : g_snapshots).fetch_add(1); }

void install(int signal) {
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  DDPX_CHECK(::sigaction(signal, &action, nullptr) == 0, ErrorKind::kIo,
             "cannot install the snapshot signal handler ({})", ::sigabbrev_np(signal));
}

}  // namespace

void install_snapshot_signals() {
  install(SIGUSR1);
  install(SIGUSR2);
  // Requests held while the process started (blocked by `ddpx`, or by the launcher's fork)
  // arrive now.
  sigset_t held;
  sigemptyset(&held);
  sigaddset(&held, SIGUSR1);
  sigaddset(&held, SIGUSR2);
  ::pthread_sigmask(SIG_UNBLOCK, &held, nullptr);
}

SnapshotRequests::SnapshotRequests(dist::Context& context, torch::Device device,
                                   int64_t check_every)
    : context_(context), device_(device), check_every_(std::max<int64_t>(check_every, 1)) {
  install_snapshot_signals();
}

SnapshotRequest SnapshotRequests::poll(int64_t global_step, bool force) {
  if (!force && global_step % check_every_ != 0) return {};
  // Each rank's counts in its own column; the sum gathers them. One request forwarded to every
  // rank is counted once by each: the most any rank counted is the number of requests.
  torch::Tensor counts = torch::zeros({2, context_.world_size()});
  counts[0][context_.rank()] = g_snapshots.load();
  counts[1][context_.rank()] = g_stops.load();
  counts = counts.to(device_);
  context_.all_reduce_sum(counts);
  counts = std::get<0>(counts.cpu().max(1));
  const auto snapshots = static_cast<int64_t>(counts[0].item<float>());
  const auto stops = static_cast<int64_t>(counts[1].item<float>());
  SnapshotRequest r;
  r.stop = stops > stops_taken_;
  r.snapshot = r.stop || snapshots > snapshots_taken_;
  snapshots_taken_ = std::max(snapshots_taken_, snapshots);
  stops_taken_ = std::max(stops_taken_, stops);
  return r;
}

}  // namespace ddpx::train
