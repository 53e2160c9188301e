// `ddpx run`: start this node's workers, route their output to per-rank logs and the console,
// watch them, and end the job as one.
//
// Contract: run_job() blocks until every worker has exited and returns the launcher's exit
// code: 0 when all workers exited 0; when one fails (non-zero exit or killed by a signal) the
// launcher names it, prints the end of its log, stops the others (SIGTERM to each process
// group, SIGKILL after --grace_s) and returns that worker's code (128+signal when killed); on
// SIGINT/SIGTERM/SIGHUP to the launcher it forwards the signal, stops every worker the same
// way and returns 128+signal. With --max_restarts K a failed job is started again, all
// workers together, up to K times, with DDPX_RESTART_COUNT counting the restarts.
// Bad options throw kUsage before anything starts.
#pragma once

#include "launch/options.h"

namespace ddpx::launch {

int run_job(const LaunchOptions& options);

}  // namespace ddpx::launch
