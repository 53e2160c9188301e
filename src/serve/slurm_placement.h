// Jobs handed to Slurm (`ddpx serve --scheduler slurm`, slurm_jobs.h): the service places
// nothing itself. Each queued job (within its user's quota) becomes a batch script like `ddpx
// sbatch`'s, submitted with sbatch; Slurm queues and places it, and its state follows Slurm's
// (squeue, once a second at most). A stop is `scancel`, a snapshot `scancel --signal=USR1`.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launch/sbatch.h"
#include "serve/placement.h"
#include "serve/scheduler.h"

namespace ddpx::serve {

class SlurmPlacement : public Placement {
 public:
  SlurmPlacement(Store& store, SchedulerOptions options);

  const char* name() const override { return "slurm"; }
  int slots() const override { return 0; }  // Slurm places the jobs
  // Workers spread evenly over the nodes, no extra ports, and `sbatch --test-only` says Slurm
  // could ever run it (400 with Slurm's reason, before the job is kept).
  void check(const std::vector<std::string>& command, int workers, int nodes,
             int extra_ports) override;
  bool holds(const Job& job) const override { return !job.slurm_id.empty(); }
  bool start(Job& job) override;  // always hands the job on: Slurm queues it
  void refresh() override;
  void stop(const Job& job) override;
  void snapshot(const Job& job) override;

 private:
  launch::SbatchOptions slurm_script(const std::vector<std::string>& command, int workers,
                                     int nodes, int64_t id) const;
  void submit_to_slurm(Job& job);

  Store& store_;
  SchedulerOptions options_;
  std::chrono::steady_clock::time_point last_slurm_poll_{};
};

}  // namespace ddpx::serve
