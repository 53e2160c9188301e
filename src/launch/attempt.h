// One start of all of this node's workers, watched until every one of them has exited: their
// output goes to their logs (worker_output.h), the launcher's signals (signal_pipe.h) are
// forwarded, and the first failure stops the rest (launcher.h states the contract). The
// launcher runs one attempt per start: again after a failure, up to --max_restarts.
#pragma once

#include <string>
#include <vector>

#include "launch/options.h"
#include "launch/plan.h"
#include "launch/worker_output.h"

namespace ddpx::launch {

enum class Outcome { kSuccess, kWorkerFailed, kInterrupted };

struct AttemptResult {
  Outcome outcome = Outcome::kSuccess;
  int exit_code = 0;
};

// Starts plan's workers (outputs[i] is worker i's) and returns once all have exited. A worker
// that cannot be started stops the others, then throws. signal_fd: SignalPipe::fd().
// trace_dir: where the workers write their collective traces, reported on a failure.
AttemptResult run_attempt(const LaunchOptions& options, const JobPlan& plan,
                          std::vector<WorkerOutput>& outputs, int signal_fd,
                          const std::string& trace_dir);

// "ddpx run: LINE" on stderr.
void say(const std::string& line);

}  // namespace ddpx::launch
