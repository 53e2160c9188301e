#include "serve/local_placement.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "launch/job_record.h"
#include "serve/job_files.h"

extern char** environ;

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
  std::string console = fmt::format("{}/logs/svc{}.console", options_.state_dir, job.id);

  // Everything the child needs is made here: the service has many threads, and after fork()
  // only async-signal-safe calls are safe (a malloc could wait forever on a lock that another
  // thread held at the fork, with the job holding the service's sockets).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("DDPX_JOBS_DIR=", 0) != 0 && kv.rfind("DDPX_JOB_PORTS=", 0) != 0)
      env_strings.push_back(kv);
  }
  env_strings.push_back("DDPX_JOBS_DIR=" + options_.state_dir + "/jobs");
  env_strings.push_back("DDPX_JOB_PORTS=" + extra);  // the job's own services bind these
  std::vector<char*> args, envp;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out = ::open(console.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  DDPX_CHECK(out >= 0 && in >= 0, ErrorKind::kIo, "cannot open {}: {}", console,
             std::strerror(errno));

  // Every signal is blocked across the fork: the child must never run the service's handlers
  // (a stop that reached it before its exec would be swallowed by them, and the job would run
  // on). It resets them, then unblocks: a SIGTERM that came meanwhile ends it, as it would end
  // the launcher.
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();  // the job outlives the service
    for (int signal = 1; signal < SIGRTMIN; ++signal) {
      if (signal != SIGKILL && signal != SIGSTOP) ::signal(signal, SIG_DFL);
    }
    // Snapshot requests that come before the launcher installs its handlers are dropped, not
    // fatal (their default action); exec keeps an ignored signal ignored.
    ::signal(SIGUSR1, SIG_IGN);
    ::signal(SIGUSR2, SIG_IGN);
    ::dup2(out, STDOUT_FILENO);  // dup2 clears close-on-exec on the copies
    ::dup2(out, STDERR_FILENO);
    ::dup2(in, STDIN_FILENO);
    // No descriptor of the service (its listening socket, clients' connections, the
    // database) may live on in the job.
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  ::close(out);
  ::close(in);
  DDPX_CHECK(pid > 0, ErrorKind::kIo, "fork failed starting job {}: {}", job.id,
             std::strerror(errno));
  children_.insert(pid);
  job.pid = pid;
  job.state = JobState::kRunning;
  job.started = std::time(nullptr);
  ports_[job.id] = std::move(ports);
  store_.update_job(job);
}

}  // namespace ddpx::serve
