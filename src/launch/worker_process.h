// Starting one worker process and signalling it. Each worker:
//   - runs in its own process group (setpgid), so a signal to the group reaches the programs
//     it starts too;
//   - dies with the launcher: PR_SET_PDEATHSIG(SIGKILL), set after fork and checked against
//     getppid() for the case where the launcher died before the prctl;
//   - has stdin from /dev/null and stdout/stderr on two pipes the launcher reads.
#pragma once

#include <sys/types.h>

#include "launch/plan.h"

namespace ddpx::launch {

struct WorkerProcess {
  pid_t pid = -1;   // also its process group id
  int out_fd = -1;  // read ends, non-blocking, close-on-exec
  int err_fd = -1;
};

// Throws kIo when fork or pipe fails. An exec failure shows as exit code 127 with the reason
// on the worker's stderr.
WorkerProcess spawn_worker(const WorkerSpec& spec);

// Sends `signal` to the worker's process group (falls back to the pid if the group is gone).
void signal_worker(pid_t pid, int signal);

// "exit code 3" or "signal 9 (SIGKILL)" for a waitpid status.
std::string describe_status(int status);

}  // namespace ddpx::launch
