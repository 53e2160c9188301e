// The job service's state: one SQLite database in the state folder (WAL mode, so a kill -9 of
// the service loses no committed record and readers never block the writer). Users with the
// SHA-256 of their token, and jobs with their request, state, devices, ports, process and exit
// code. Every method is one transaction; the object is used from the HTTP threads and the
// scheduler behind one mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace ddpx::serve {

struct User {
  std::string name;
  bool admin = false;
};

enum class JobState { kQueued, kRunning, kStopping, kEnded };
const char* job_state_name(JobState state);
JobState parse_job_state(const std::string& name);

struct Job {
  int64_t id = 0;
  std::string user;
  std::vector<std::string> command;  // after `ddpx run N --`
  int workers = 1;
  int nodes = 1;  // with Slurm: the nodes the workers spread over (evenly)
  int extra_ports = 0;
  JobState state = JobState::kQueued;
  std::vector<int> slots;  // device slots (GPU ids, or CPU slots 0..N-1)
  std::vector<int> ports;  // [0]: the job's rendezvous port, then its extra ports
  int pid = 0;             // the `ddpx run` launcher while running
  std::string log_dir;     // the launcher's log folder
  int exit_code = 0;
  bool stop_requested = false;
  int64_t submitted = 0, started = 0, ended = 0;  // unix seconds
  std::string slurm_id;     // --scheduler slurm: the Slurm job, once submitted
  std::string slurm_state;  // and its state as Slurm last reported it (e.g. "PENDING Resources")
};

class Store {
 public:
  explicit Store(const std::string& path);  // creates the schema when new; throws kIo
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  void add_user(const std::string& name, const std::string& token_hash, bool admin);
  std::optional<User> user_by_token_hash(const std::string& token_hash);

  int64_t insert_job(const Job& job);  // returns the new id
  void update_job(const Job& job);     // every field but id, user, command, submitted
  std::optional<Job> job(int64_t id);
  std::vector<Job> jobs(const std::string& user);  // empty user: every job; by id
  std::vector<Job> jobs_in(JobState state);        // by id, so the queue is first come first
  void delete_job(int64_t id);

 private:
  void exec(const std::string& sql);
  void add_missing_columns();  // a state folder from an older ddpx
  sqlite3* db_ = nullptr;
  std::mutex mutex_;
};

}  // namespace ddpx::serve
