// The service's allocator and job runner. Devices (the host's GPUs, or CPU slots on a host
// without GPUs) and ports are assigned by the scheduler, never twice; jobs that do not fit
// wait in a queue, first come first served (the head of the queue is never overtaken), with an
// optional per-user device quota.
//
// A job runs as `ddpx run N --gpus ... --master_port P -- COMMAND` in its own session, so a
// restart of the service (even kill -9) leaves it running. Its liveness and exit code come
// from the launcher's record in the service's job table (launch/job_record.h, under
// STATE/jobs), not from waitpid: after a restart the service re-adopts running jobs and reads
// the exit code of those that ended meanwhile. A `ddpx train` job gets --save_dir
// STATE/files/ID/checkpoints (job_files.h): its checkpoints and snapshots.
//
// With SchedulerOptions::slurm (`ddpx serve --scheduler slurm`, slurm_jobs.h) the scheduler
// places nothing itself: each queued job (within the user's quota) is submitted to Slurm, which
// queues and places it; its state follows Slurm's (scheduler_slurm.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launch/port.h"
#include "launch/sbatch.h"
#include "serve/slurm_jobs.h"
#include "serve/store.h"

namespace ddpx::serve {

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
  bool uses_slurm() const { return options_.slurm.has_value(); }
  // Queues a job; throws kUsage naming the field when it can never run here. `checkpoints`
  // (files) are copied into the new job's checkpoint folder before it can start: a job
  // restored from a snapshot or a backup resumes from them (with --resume auto).
  // `nodes` > 1 only with Slurm: the workers spread evenly over that many nodes.
  Job submit(const std::string& user, const std::vector<std::string>& command, int workers,
             int extra_ports, const std::vector<std::string>& checkpoints = {}, int nodes = 1);
  // Asks a running train job for a snapshot (SIGUSR1 to its launcher, which forwards it; the
  // workers write a checkpoint at their next step and go on). Throws kUsage when it cannot.
  void snapshot(int64_t id);
  const std::string& state_dir() const { return options_.state_dir; }
  // Stops a queued job (it ends at once) or a running one (SIGTERM to its launcher).
  Job stop(int64_t id);
  // A new run of an ended job: back to the queue with the same request.
  Job restart(int64_t id);

  void tick();  // one pass: refresh running jobs from their records, start what fits

 private:
  void refresh_running();
  void start_fitting();
  void launch(Job& job);
  // scheduler_slurm.cpp
  launch::SbatchOptions slurm_script(const std::vector<std::string>& command, int workers,
                                     int nodes, int64_t id) const;
  void check_with_slurm(const std::vector<std::string>& command, int workers, int nodes) const;
  void submit_to_slurm(Job& job);
  void refresh_slurm();

  Store& store_;
  SchedulerOptions options_;
  std::mutex mutex_;
  std::map<int64_t, std::vector<launch::PortReservation>> ports_;
  std::set<int> children_;     // launchers this service started and has not yet waited for
  std::map<int, int> exited_;  // those it waited for while their job ran: pid -> exit code
  std::chrono::steady_clock::time_point last_slurm_poll_{};
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

}  // namespace ddpx::serve
