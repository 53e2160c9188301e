// Jobs placed on this host (`ddpx serve`, the default): device slots (the host's GPUs, or CPU
// slots on a host without GPUs) and ports are assigned here, never twice. A job runs as `ddpx
// run N --gpus ... --master_port P -- COMMAND` in its own session, so a restart of the service
// (even kill -9) leaves it running. Its liveness and exit code come from the launcher's record
// in the service's job table (launch/job_record.h, under STATE/jobs), not from waitpid: after a
// restart the service re-adopts running jobs and reads the exit code of those that ended
// meanwhile.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "launch/port.h"
#include "serve/placement.h"
#include "serve/scheduler.h"

namespace ddpx::serve {

class LocalPlacement : public Placement {
 public:
  LocalPlacement(Store& store, SchedulerOptions options);

  const char* name() const override { return "local"; }
  int slots() const override;
  void check(const std::vector<std::string>& command, int workers, int nodes,
             int extra_ports) override;
  bool holds(const Job& job) const override { return job.pid > 0; }
  bool start(Job& job) override;  // on free slots, first come first served
  void refresh() override;        // reaps its launchers, reads their records
  void stop(const Job& job) override;
  void snapshot(const Job& job) override;

 private:
  void refresh_running();
  void launch(Job& job);  // forks the job's `ddpx run` on job.slots

  Store& store_;
  SchedulerOptions options_;
  std::map<int64_t, std::vector<launch::PortReservation>> ports_;
  std::set<int> children_;     // launchers this service started and has not yet waited for
  std::map<int, int> exited_;  // those it waited for while their job ran: pid -> exit code
};

}  // namespace ddpx::serve
