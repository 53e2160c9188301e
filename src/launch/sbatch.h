// `ddpx sbatch`: a Slurm batch script in the shape of the seed tutorial's (one `srun` of ddpx
// workers, one task per GPU; rank 0's host is the allocation's first node), written atomically
// and optionally submitted with sbatch.
//
// With requeue_signal_s > 0 the script asks Slurm for SIGUSR1 that many seconds before the time
// limit (`--signal=B:USR1@S`, to the batch shell) and for `--requeue`: the shell's trap
// requeues the job, Slurm ends this run, and the next run resumes from the newest good
// checkpoint (`--save_dir` is required; `--resume auto` is added). The epoch in flight is
// trained again; every finished epoch is kept.
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

struct SbatchOptions {
  int nodes = 1;
  int gpus_per_node = 0;
  int ntasks_per_node = 0;  // 0: gpus_per_node, or 1 without GPUs
  int cpus_per_task = 0;    // 0: Slurm's default
  std::string time;         // Slurm's --time, e.g. 01:00:00 or 2-00:00:00; empty: partition's
  std::string partition;
  std::string account;
  std::string job_name = "ddpx";
  std::string log_dir = "log/slurm";  // %x-%j.out per job
  std::string task_log_dir;           // set: each task's output in DIR/rank<K>.log instead
  int requeue_signal_s = 0;
  std::string script;                // where to write it; empty: <job_name>.sbatch
  std::string ddpx_path;             // the ddpx binary the nodes run (absolute)
  std::vector<std::string> command;  // `train ARGS...` or a program and its arguments
};

// Throws kUsage naming the flag.
void validate(const SbatchOptions& options);

// The script's text.
std::string make_sbatch_script(const SbatchOptions& options);

// Writes the script (creating the log folder Slurm writes into); returns its path.
std::string write_sbatch_script(const SbatchOptions& options);

// Runs `sbatch --parsable SCRIPT` and returns the job id; kIo with sbatch's own words otherwise.
// test_only: `sbatch --test-only` (Slurm checks that it could ever run the job, and submits
// nothing); returns sbatch's estimate.
std::string submit_sbatch(const std::string& script_path, bool test_only = false);

}  // namespace ddpx::launch
