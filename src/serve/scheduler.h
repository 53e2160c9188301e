// The service's job queue. Jobs that do not fit wait in a queue, first come first served (the
// head of the queue is never overtaken), with an optional per-user device quota; a pass every
// 200 ms follows the running jobs and starts what fits. Where and how a job runs is its
// placement's (placement.h): this host's device slots and `ddpx run` launchers
// (local_placement.h), or Slurm with SchedulerOptions::slurm (`ddpx serve --scheduler slurm`,
// slurm_placement.h). A `ddpx train` job gets --save_dir STATE/files/ID/checkpoints
// (job_files.h): its checkpoints and snapshots.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serve/slurm_jobs.h"
#include "serve/store.h"

namespace ddpx::serve {

class Placement;

struct SchedulerOptions {
  std::string state_dir;
  std::string ddpx_path;               // the `ddpx` binary jobs run
  std::vector<int> gpus;               // the host's GPU ids; empty: CPU slots
  int cpu_slots = 1;                   // slots on a host without GPUs
  int user_quota = 0;                  // devices one user may hold at once; 0: no limit
  std::optional<SlurmSettings> slurm;  // set: hand jobs to Slurm
};

class Scheduler {
 public:
  Scheduler(Store& store, SchedulerOptions options);
  ~Scheduler();  // stops the loop; running jobs go on

  int total_slots() const;  // this host's device slots (with Slurm: 0, Slurm places jobs)
  const char* placement_name() const;  // "local" or "slurm"
  // Queues a job; throws kUsage naming the field when it can never run here. `checkpoints`
  // (files) are copied into the new job's checkpoint folder before it can start: a job
  // restored from a snapshot or a backup resumes from them (with --resume auto).
  // `nodes` > 1 only with Slurm: the workers spread evenly over that many nodes.
  Job submit(const std::string& user, const std::vector<std::string>& command, int workers,
             int extra_ports, const std::vector<std::string>& checkpoints = {}, int nodes = 1);
  // Asks a running train job for a snapshot (SIGUSR1 to its launcher, which forwards it, or to
  // its Slurm tasks; the workers write a checkpoint at their next step and go on). Throws
  // kUsage when it cannot.
  void snapshot(int64_t id);
  const std::string& state_dir() const { return options_.state_dir; }
  // Stops a queued job (it ends at once) or a running one (SIGTERM to its launcher; with Slurm,
  // scancel, also of a job Slurm still queues).
  Job stop(int64_t id);
  // A new run of an ended job: back to the queue with the same request.
  Job restart(int64_t id);

  void tick();  // one pass: follow the placed jobs, start what fits

 private:
  void start_fitting();

  Store& store_;
  SchedulerOptions options_;
  std::unique_ptr<Placement> placement_;  // past its name and slots, only under mutex_
  std::mutex mutex_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

}  // namespace ddpx::serve
