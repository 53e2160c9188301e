// Jobs placed on this host (`ddpx serve`, the default): device slots (the host's GPUs, or CPU
// slots on a host without GPUs) and ports are assigned here, never twice. A job runs as `ddpx
// run N --gpus ... --master_port P -- COMMAND` in its own session, so a restart of the service
// (even kill -9) leaves it running.
//
// GPUs are the host's, not the service's: they are reserved in the host's one job table
// (launch/reservation.h, $DDPX_JOBS_DIR or /tmp/ddpx-jobs), which `ddpx run` and `ddpx shell`
// draw from too. A job starts only on GPUs that no live record there holds; the service writes
// the job's record ("starting", under the table's lock) before it starts the launcher, and the
// launcher takes the record over (DDPX_RESERVATION), so a direct launch is never given them in
// between, and a GPU a direct launch holds is busy here until it ends. Ports come from the
// host-wide port locks (launch/port.h) that direct launches use too.
//
// A job's liveness and exit code come from its launcher's record in that table, not from
// waitpid: after a restart the service re-adopts running jobs and reads the exit code of those
// that ended meanwhile.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "launch/port.h"
#include "launch/reservation.h"
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
  // Forks the job's `ddpx run` on job.slots, handing it `hold` (the job's record, kept here
  // until the launcher has taken it over).
  void launch(Job& job, std::vector<launch::PortReservation> ports, launch::HostReservation hold);

  Store& store_;
  SchedulerOptions options_;
  std::map<int64_t, std::vector<launch::PortReservation>> ports_;
  std::map<int64_t, launch::HostReservation> holds_;  // until each job's launcher takes over
  std::map<int, std::string> gpu_ids_;  // each GPU slot's id, as the launcher names it
  std::set<int> children_;              // launchers this service started and has not yet waited for
  std::map<int, int> exited_;           // those it waited for while their job ran: pid -> exit code
};

}  // namespace ddpx::serve
