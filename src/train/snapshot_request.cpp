#include "train/snapshot_request.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/error.h"

namespace ddpx::train {
namespace {

std::atomic<int> g_snapshot{0};
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

void on_signal(int signal) {
  if (signal == SIGUSR2) g_stop.store(1);
  g_snapshot.store(1);
}

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
  float local[2] = {static_cast<float>(g_snapshot.exchange(0)),
                    static_cast<float>(g_stop.exchange(0))};
  torch::Tensor flags = torch::tensor({local[0], local[1]}).to(device_);
  context_.all_reduce_sum(flags);
  flags = flags.cpu();
  SnapshotRequest r;
  r.stop = flags[1].item<float>() > 0;
  r.snapshot = r.stop || flags[0].item<float>() > 0;
  return r;
}

}  // namespace ddpx::train
