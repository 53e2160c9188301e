// A job's hold on this host's devices and port, shared with every other ddpx job on it
// (job_record.h holds the table). acquire() takes the folder's lock (flock on .lock, held for
// milliseconds), reads the live jobs, lets the caller choose devices that none of them holds,
// writes the job's record and keeps it locked. Two jobs started at the same moment are thus
// serialized and never get the same GPU; ports are kept apart by PortReservation (port.h) and
// recorded here so `ddpx jobs` shows them.
//
// The reservation ends with the object (finish() records the exit code) or with the process:
// a killed job's lock goes with it and the next reader sees the record as lost.
//
// This one table serves every kind of job on the host: `ddpx run`, `ddpx shell` and the jobs of
// `ddpx serve`. The service reserves a job's devices here before it starts the job's launcher
// (a record of kind "starting", held by the service); the launcher, told the id in
// DDPX_RESERVATION, takes that record over under the same lock (acquire's `takes_over`), so
// the devices are never free in between and a direct launch can never be given them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launch/job_record.h"

namespace ddpx::launch {

// The devices of `visible` that no live job holds, or a kUsage error naming the jobs that hold
// the rest when fewer than `needed` are free.
std::vector<std::string> free_devices(const std::vector<std::string>& visible, int needed,
                                      const std::vector<JobRecord>& live);

// A kUsage error naming the job that holds one of `requested` (an explicit --gpus list).
void check_devices_free(const std::vector<std::string>& requested,
                        const std::vector<JobRecord>& live);

// The kind of a record that a job service holds for a job whose launcher is starting.
inline constexpr const char* kStartingKind = "starting";

// A random 6-hex-digit job id.
std::string new_job_id();

class HostReservation {
 public:
  // Chooses the devices given the live jobs; throws to refuse.
  using DeviceChooser = std::function<std::vector<std::string>(const std::vector<JobRecord>&)>;

  // `draft` has everything but devices, uid/user/pid and start time, which acquire() fills.
  // An empty draft.id gets a fresh random one; a given id that a live job has is refused.
  // `takes_over`: the id of a live "starting" record (a job service's hold for this job, which
  // must be draft.id): it is not counted as live, and the new record replaces it, so that the
  // chooser may give the devices it holds. Not live (the service was killed): ignored.
  static HostReservation acquire(JobRecord draft, const DeviceChooser& choose,
                                 const std::string& takes_over = "");

  HostReservation(HostReservation&& other) noexcept;
  HostReservation& operator=(HostReservation&&) = delete;
  HostReservation(const HostReservation&) = delete;
  ~HostReservation();  // finish(-1) if not finished: the job's record says it ended abnormally

  const JobRecord& record() const { return record_; }
  void finish(int exit_code);  // rewrites the record as ended and drops the lock

 private:
  HostReservation(JobRecord record, std::string path, int fd)
      : record_(std::move(record)), path_(std::move(path)), fd_(fd) {}
  JobRecord record_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace ddpx::launch
