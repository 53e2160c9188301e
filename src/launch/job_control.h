// `ddpx jobs`, `ddpx logs` and `ddpx stop`: this host's job table (job_record.h) from the
// shell, in place of the seed's `docker ps`, `docker logs -f` and `docker stop`.
#pragma once

#include <string>
#include <vector>

#include "launch/job_record.h"

namespace ddpx::launch {

// One aligned row per job: JOB KIND USER PID DEVICES PORT STARTED STATE LOGS.
std::string format_jobs(const std::vector<JobRecord>& jobs);
std::string jobs_json(const std::vector<JobRecord>& jobs);  // a JSON array with `state`

// Writes rank `rank`'s log of the job to stdout; with `follow`, keeps writing what is appended
// until the job is no longer running. Throws kUsage for an unknown job, a job without logs
// (a shell) or a rank it has no log for.
void show_logs(const std::string& id, int rank, bool follow);

// Sends SIGTERM to the job's launcher (which stops its workers with its grace period) and waits
// up to timeout_s for it to end; returns the job's exit code. Refuses (kUsage) another user's
// job unless run as root, and a job that is not running.
int stop_job(const std::string& id, double timeout_s);

// Asks a running job for a snapshot: SIGUSR1 to its launcher, which forwards it to the workers
// (`ddpx train` writes a checkpoint into its --save_dir at its next step and goes on), or
// SIGUSR2 with `then_stop` (it stops after the checkpoint). Refuses (kUsage) a job that is not
// running, a shell, a job that cannot write one (snapshot_refusal), or another user's job unless
// run as root.
void snapshot_job(const std::string& id, bool then_stop);

// Why a job running `command` (the words after `ddpx run N --`, or a service job's command with
// the --save_dir the service adds) cannot write a snapshot, or empty when it can: only `ddpx
// train` with --save_dir writes one; anything else would be signalled for nothing (or killed by
// a SIGUSR1 it does not handle). `ddpx snapshot` refuses with it, the service answers 409.
std::string snapshot_refusal(const std::vector<std::string>& command);

}  // namespace ddpx::launch
