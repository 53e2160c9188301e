// Where the service's jobs run: the half of the scheduler that differs between running them on
// this host and handing them to Slurm. The Scheduler (scheduler.h) keeps the queue, the users'
// quotas and the checks every request gets; a Placement says what fits, starts it, follows it
// and signals it:
// - LocalPlacement (local_placement.h): this host's device slots and ports, each job a `ddpx
//   run` launcher of its own, followed through the launchers' records.
// - SlurmPlacement (slurm_placement.h): each job a batch script for sbatch, followed with
//   squeue, stopped and signalled with scancel; Slurm queues and places.
//
// Contract: the Scheduler calls a placement only while it holds its own lock, so a placement
// keeps no lock of its own. A placement changes only the fields of a Job that are its own
// (slots, ports, pid, log_dir, slurm_id, slurm_state, and its state and exit code once started)
// and writes every job it changes to the Store itself. Errors are ddpx::Error: kUsage for a
// request that can never run here, kIo for a program or signal that failed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve/store.h"

namespace ddpx::serve {

struct SchedulerOptions;

class Placement {
 public:
  virtual ~Placement() = default;

  virtual const char* name() const = 0;  // "local" or "slurm" (GET /api/v1/health's scheduler)
  // The device slots it places jobs on; 0 where another scheduler places them (no limit here).
  virtual int slots() const = 0;
  // Throws kUsage naming the field when a job of this shape can never run here. Called after
  // the Scheduler's checks of each field on its own (workers >= 1 and within slots(), the
  // quota, ports 0..8, nodes >= 1).
  virtual void check(const std::vector<std::string>& command, int workers, int nodes,
                     int extra_ports) = 0;
  // Whether a queued or running job is in its hands (a launcher started, a Slurm job
  // submitted): a stop or snapshot then goes through it, and the job counts to its user's quota.
  virtual bool holds(const Job& job) const = 0;
  // Starts a queued job it does not hold yet, or hands it on; false when it does not fit now
  // (the queue then waits: its head is never overtaken). A job that cannot be started ends.
  virtual bool start(Job& job) = 0;
  // Follows the jobs it holds: running, log folder, their end and exit code.
  virtual void refresh() = 0;
  // Asks a job it holds to end (SIGTERM to its launcher, scancel); refresh() sees the end.
  virtual void stop(const Job& job) = 0;
  // Asks a running job it holds for a snapshot: SIGUSR1 to its launcher or to its tasks.
  virtual void snapshot(const Job& job) = 0;
};

// The placement `options` ask for: Slurm's when options.slurm is set, else this host's.
std::unique_ptr<Placement> make_placement(Store& store, const SchedulerOptions& options);

}  // namespace ddpx::serve
