#include "launch/worker_process.h"

#include <signal.h>

#include "core/error.h"

namespace ddpx::launch {

Child spawn_worker(const WorkerSpec& spec) {
  SpawnSpec s;
  s.program = spec.path;
  s.argv = spec.argv;  // argv[0] as the user wrote it
  s.env = spec.env;
  s.stdout_to = ChildOutput::kPipe;
  s.stderr_to = ChildOutput::kPipe;
  s.group = ChildGroup::kNewGroup;
  // What the launcher inherited (a make jobserver's descriptors) reaches the workers, as it
  // would reach any child; what it opens itself is close-on-exec.
  s.close_other_fds = false;
  s.death_signal = SIGKILL;
  s.default_signals = {SIGPIPE};  // the launcher ignores it; exec keeps ignored signals ignored
  s.blocked_signals = std::vector<int>{};
  if (spec.holds_snapshot_signals_at_start) {
    // Blocked signals stay pending across exec: the worker takes them once its handlers
    // are in (train/snapshot_request.h), so an early request is neither fatal nor lost.
    s.blocked_signals = std::vector<int>{SIGUSR1, SIGUSR2};
  }
  try {
    return spawn(s);
  } catch (const Error& e) {
    fail(e.kind(), "starting rank {}: {}", spec.global_rank, e.what());
  }
}

}  // namespace ddpx::launch
