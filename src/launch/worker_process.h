// How `ddpx run` starts one worker (core/subprocess.h does the starting). Each worker:
//   - runs in its own process group, so a signal to the group (signal_group) reaches the
//     programs it starts too;
//   - dies with the launcher: its death signal is SIGKILL;
//   - has stdin from /dev/null and stdout/stderr on two pipes the launcher reads;
//   - starts with SIGPIPE at its default action (the launcher ignores it) and, for
//     `ddpx train`, the snapshot requests blocked until it installs their handlers.
#pragma once

#include "core/subprocess.h"
#include "launch/plan.h"

namespace ddpx::launch {

// Throws (naming the rank) when the worker cannot be started.
Child spawn_worker(const WorkerSpec& spec);

}  // namespace ddpx::launch
