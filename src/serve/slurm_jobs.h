// `ddpx serve --scheduler slurm`: where a cluster already has Slurm, the service hands each job
// to it instead of placing it on this node. A job becomes a batch script like `ddpx sbatch`'s
// (launch/sbatch.h; one srun task per worker, each task's output in LOGS/svcID/rank<K>.log),
// submitted with sbatch; its state and exit code come from squeue, a stop is
// `scancel`, a snapshot request is SIGUSR1 to its tasks (`scancel --signal=USR1`). Slurm
// queues and places the jobs; the service keeps its users, tokens, quota and records. The
// state folder must be on a file system the compute nodes share (logs and checkpoints).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddpx::serve {

struct SlurmSettings {
  std::string partition;  // empty: the cluster's default
  std::string account;
  std::string time;   // each job's --time; empty: the partition's limit
  bool gpus = false;  // each worker gets a GPU (--gpus-per-node=WORKERS)
};

// One job as Slurm reports it.
struct SlurmStatus {
  enum class Phase { kPending, kRunning, kEnded };
  Phase phase = Phase::kPending;
  std::string state;   // Slurm's JobState, e.g. PENDING, RUNNING, COMPLETED, CANCELLED
  std::string reason;  // why it waits or failed, "None" when nothing to say
  int exit_code = 0;   // 128+S when signal S ended it, else the batch script's exit code
};

// One line of `squeue --noheader --Format=JobID:|,State:|,Reason:|,exit_code:|`: the id and the
// status. Throws kIo on a line of another shape.
std::pair<std::string, SlurmStatus> parse_squeue_job(const std::string& line);

// The status of each of `ids` that slurmctld still knows (one squeue call for all of them, ended
// ones included); an id it has forgotten (MinJobAge after its end) is absent. Throws kIo when
// slurmctld cannot be asked.
std::map<std::string, SlurmStatus> slurm_jobs(const std::vector<std::string>& ids);

// `scancel [--signal=SIGNAL] ID`: ends the job, or (with a signal) signals its tasks only, not
// the batch shell. Throws kIo with scancel's words.
void slurm_cancel(const std::string& id, const std::string& signal = "");

// Throws kUsage naming the program unless sbatch, squeue and scancel are on PATH.
void require_slurm_programs();

}  // namespace ddpx::serve
