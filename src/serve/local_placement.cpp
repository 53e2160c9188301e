#include "serve/local_placement.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/subprocess.h"
#include "launch/job_record.h"
#include "serve/job_files.h"

namespace ddpx::serve {
namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

LocalPlacement::LocalPlacement(Store& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)) {}

int LocalPlacement::slots() const {
  return options_.gpus.empty() ? options_.cpu_slots : static_cast<int>(options_.gpus.size());
}

void LocalPlacement::check(const std::vector<std::string>&, int, int nodes, int) {
  DDPX_CHECK(nodes == 1, ErrorKind::kUsage,
             "nodes: {}: this service runs each job on this node (give 1); `ddpx serve "
             "--scheduler slurm` spreads jobs over nodes",
             nodes);
}

bool LocalPlacement::start(Job& job) {
  std::set<int> used;
  for (JobState state : {JobState::kRunning, JobState::kStopping})
    for (const Job& other : store_.jobs_in(state))
      used.insert(other.slots.begin(), other.slots.end());
  std::vector<int> free;
  for (int i = 0; i < slots(); ++i) {
    int slot = options_.gpus.empty() ? i : options_.gpus[static_cast<size_t>(i)];
    if (!used.count(slot)) free.push_back(slot);
  }
  if (static_cast<int>(free.size()) < job.workers) return false;
  job.slots.assign(free.begin(), free.begin() + job.workers);
  launch(job);
  return true;
}

void LocalPlacement::refresh() {
  // Reap the launchers this service started, each by its pid (other threads wait for the
  // programs they run), so that none is left a zombie. Their records tell how they ended; the
  // status is kept for a job still running here, which covers a launcher stopped before it
  // wrote any record.
  std::set<int> active;
  for (JobState state : {JobState::kRunning, JobState::kStopping})
    for (const Job& job : store_.jobs_in(state)) active.insert(job.pid);
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    pid_t reaped = ::waitpid(*it, &status, WNOHANG);
    if (reaped == 0) {
      ++it;
      continue;
    }
    if (reaped == *it && active.count(*it))
      exited_[*it] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    it = children_.erase(it);
  }
  refresh_running();
}

void LocalPlacement::refresh_running() {
  std::vector<launch::JobRecord> records = launch::read_jobs(options_.state_dir + "/jobs");
  for (JobState state : {JobState::kRunning, JobState::kStopping}) {
    for (Job& job : store_.jobs_in(state)) {
      // Slurm's (a service with --scheduler slurm on this folder before): not this host's.
      if (!job.slurm_id.empty()) continue;
      auto record = std::find_if(records.begin(), records.end(), [&](const launch::JobRecord& r) {
        return r.id == job_name(job.id);
      });
      if (record != records.end() && record->state == launch::JobState::kLive) {
        if (job.log_dir.empty()) {
          job.log_dir = record->log_dir;
          store_.update_job(job);
        }
        continue;
      }
      // Not running: ended (its code recorded), lost (killed), or never came up.
      bool started = record != records.end();
      bool alive = job.pid > 0 && ::kill(job.pid, 0) == 0;
      if (!started && alive && std::time(nullptr) - job.started < 30) continue;  // starting
      job.state = JobState::kEnded;
      job.ended = std::time(nullptr);
      if (started && record->state == launch::JobState::kEnded) {
        job.exit_code = record->exit_code;
        job.log_dir = record->log_dir;
      } else if (exited_.count(job.pid)) {
        job.exit_code = exited_[job.pid];
      } else {
        job.exit_code = 137;  // gone without a word while the service was down: as SIGKILL
      }
      exited_.erase(job.pid);
      job.pid = 0;
      ports_.erase(job.id);
      store_.update_job(job);
    }
  }
}

void LocalPlacement::stop(const Job& job) { ::kill(job.pid, SIGTERM); }

void LocalPlacement::snapshot(const Job& job) {
  DDPX_CHECK(::kill(job.pid, SIGUSR1) == 0, ErrorKind::kIo, "cannot signal job {} (pid {}): {}",
             job.id, job.pid, std::strerror(errno));
}

void LocalPlacement::launch(Job& job) {
  std::vector<launch::PortReservation> ports;
  for (int i = 0; i <= job.extra_ports; ++i) ports.push_back(launch::PortReservation::pick());
  job.ports.clear();
  for (auto& p : ports) {
    job.ports.push_back(p.port());
    p.release_probe();
  }
  std::vector<std::string> argv = {options_.ddpx_path,
                                   "run",
                                   std::to_string(job.workers),
                                   "--job_name",
                                   job_name(job.id),
                                   "--log_dir",
                                   options_.state_dir + "/logs",
                                   "--master_port",
                                   std::to_string(job.ports[0]),
                                   "--gpus",
                                   options_.gpus.empty() ? "none" : join(job.slots),
                                   "--tee",
                                   "none",
                                   "--"};
  argv.insert(argv.end(), job.command.begin(), job.command.end());
  if (is_train_command(job.command)) {
    argv.push_back("--save_dir");
    argv.push_back(job_checkpoints_dir(options_.state_dir, job.id));
  }
  std::string extra;
  for (size_t i = 1; i < job.ports.size(); ++i)
    extra += (extra.empty() ? "" : ",") + std::to_string(job.ports[i]);

  // The job outlives the service in a session of its own, with none of the service's
  // descriptors (its listening socket, clients' connections, the database) and none of its
  // signal handlers. Snapshot requests that come before the launcher installs its handlers are
  // dropped, not fatal (their default action).
  SpawnSpec spec;
  spec.argv = std::move(argv);
  spec.env = {{"DDPX_JOBS_DIR", options_.state_dir + "/jobs"},
              {"DDPX_JOB_PORTS", extra}};  // the job's own services bind these
  spec.stdout_to = ChildOutput::kFile;
  spec.stderr_to = ChildOutput::kStdout;
  spec.output_file = fmt::format("{}/logs/svc{}.console", options_.state_dir, job.id);
  spec.group = ChildGroup::kNewSession;
  spec.all_signals_default = true;
  spec.ignored_signals = {SIGUSR1, SIGUSR2};
  spec.blocked_signals = std::vector<int>{};
  pid_t pid = -1;
  try {
    pid = spawn(spec).pid;
  } catch (const Error& e) {
    fail(e.kind(), "starting job {}: {}", job.id, e.what());
  }
  children_.insert(pid);
  job.pid = pid;
  job.state = JobState::kRunning;
  job.started = std::time(nullptr);
  ports_[job.id] = std::move(ports);
  store_.update_job(job);
}

}  // namespace ddpx::serve
