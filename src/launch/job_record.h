// The host-wide job table: one JSON record per ddpx job (`ddpx run`, `ddpx shell`) in a folder
// every user of the machine shares ($DDPX_JOBS_DIR, default /tmp/ddpx-jobs, sticky and
// world-writable like /tmp). A record names the job's owner, launcher pid, reserved devices and
// port, start time and log folder.
//
// Liveness is a lock, not a pid check: the job's process holds an exclusive flock on its record
// for as long as it lives, and the kernel drops it when the process dies, however it dies.
//   live  - the record is locked;
//   ended - unlocked, with `ended` and `exit_code` written by the job on its way out;
//   lost  - unlocked without them: the job's process was killed (kill -9); its devices and
//           port are free again, and listing the jobs says so.
// Ended and lost records are kept for `ddpx jobs --all` and `ddpx logs` and pruned after a week.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddpx::launch {

enum class JobState { kLive, kEnded, kLost };
const char* job_state_name(JobState state);

struct JobRecord {
  std::string id;
  std::string kind = "run";  // "run" or "shell"
  std::string user;
  int uid = 0;
  int pid = 0;                       // the launcher's (or the shell wrapper's) pid
  std::vector<std::string> devices;  // reserved GPU ids; empty on a host without GPUs
  std::string device_variable;       // CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, or empty
  int port = 0;
  int workers = 0;
  std::int64_t started = 0;  // unix seconds
  std::string log_dir;       // absolute; empty for a shell
  std::string command;
  std::int64_t ended = 0;  // unix seconds; 0 while running
  int exit_code = 0;
  JobState state = JobState::kLive;  // read from the lock, not stored
};

std::string to_json(const JobRecord& record);
// Throws kIo naming `path` when the text is not a job record.
JobRecord job_from_json(const std::string& text, const std::string& path);

// $DDPX_JOBS_DIR or /tmp/ddpx-jobs. For a job that reserves (`for_writing`), created (mode 1777)
// when missing, and a kIo error with the fix (set DDPX_JOBS_DIR to a writable folder) when it
// cannot be created or written; reading the table (jobs, logs, stop) needs neither.
std::string jobs_dir(bool for_writing = true);

// Every record in the folder with its state, oldest first. Records of jobs that ended more
// than a week ago are deleted on the way (when this user may).
std::vector<JobRecord> read_jobs(const std::string& dir);
std::vector<JobRecord> live_jobs(const std::string& dir);

// The record with this id, or a kUsage error that lists how to see the ids (`ddpx jobs`).
JobRecord find_job(const std::string& dir, const std::string& id);

std::string user_name(int uid);

}  // namespace ddpx::launch
