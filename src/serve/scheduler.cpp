#include "serve/scheduler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "launch/job_control.h"
#include "launch/job_record.h"
#include "serve/job_files.h"

extern char** environ;

namespace ddpx::serve {
namespace {

constexpr auto kTick = std::chrono::milliseconds(200);

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

Scheduler::Scheduler(Store& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)) {
  std::filesystem::create_directories(options_.state_dir + "/jobs");
  std::filesystem::create_directories(options_.state_dir + "/logs");
  tick();  // re-adopt or close what ran before a restart, before serving requests
  loop_ = std::thread([this] {
    while (!stop_.load()) {
      std::this_thread::sleep_for(kTick);
      try {
        tick();
      } catch (const std::exception&) {
        // A failed pass (the database busy, a fork failing) is retried on the next tick.
      }
    }
  });
}

Scheduler::~Scheduler() {
  stop_.store(true);
  if (loop_.joinable()) loop_.join();
}

int Scheduler::total_slots() const {
  if (uses_slurm()) return 0;
  return options_.gpus.empty() ? options_.cpu_slots : static_cast<int>(options_.gpus.size());
}

Job Scheduler::submit(const std::string& user, const std::vector<std::string>& command, int workers,
                      int extra_ports, const std::vector<std::string>& checkpoints, int nodes) {
  DDPX_CHECK(!command.empty() && !command.front().empty(), ErrorKind::kUsage,
             "command: no program; give the program and its arguments, e.g. [\"train\", "
             "\"--model\", \"resnet18\"]");
  DDPX_CHECK(workers >= 1 && (uses_slurm() || workers <= total_slots()), ErrorKind::kUsage,
             "workers: {} cannot run on this host, which has {} device slot(s)", workers,
             total_slots());
  DDPX_CHECK(options_.user_quota == 0 || workers <= options_.user_quota, ErrorKind::kUsage,
             "workers: {} is over the per-user quota of {} device(s)", workers,
             options_.user_quota);
  DDPX_CHECK(extra_ports >= 0 && extra_ports <= 8, ErrorKind::kUsage,
             "ports: {} extra ports asked; give 0 to 8", extra_ports);
  DDPX_CHECK(nodes >= 1, ErrorKind::kUsage, "nodes: {}; give 1 or more", nodes);
  DDPX_CHECK(nodes == 1 || uses_slurm(), ErrorKind::kUsage,
             "nodes: {}: this service runs each job on this node (give 1); `ddpx serve "
             "--scheduler slurm` spreads jobs over nodes",
             nodes);
  DDPX_CHECK(workers % nodes == 0, ErrorKind::kUsage,
             "workers: {} do not spread evenly over {} nodes; give a multiple of nodes", workers,
             nodes);
  DDPX_CHECK(extra_ports == 0 || !uses_slurm(), ErrorKind::kUsage,
             "ports: extra ports cannot be given with --scheduler slurm (the job runs on a node "
             "Slurm picks); give 0");
  if (uses_slurm()) {
    std::lock_guard<std::mutex> lock(mutex_);
    check_with_slurm(command, workers, nodes);  // 400 with Slurm's reason, before the job is kept
  }
  Job job;
  job.user = user;
  job.command = command;
  job.workers = workers;
  job.nodes = nodes;
  job.extra_ports = extra_ports;
  job.submitted = std::time(nullptr);
  {
    // Under the lock: the loop cannot start the job before its checkpoints are in place.
    std::lock_guard<std::mutex> lock(mutex_);
    job.id = store_.insert_job(job);
    if (!checkpoints.empty()) {
      namespace fs = std::filesystem;
      std::string dir = job_checkpoints_dir(options_.state_dir, job.id);
      std::error_code ec;
      fs::create_directories(dir, ec);
      for (const std::string& file : checkpoints) {
        if (!ec) fs::copy_file(file, dir + "/" + fs::path(file).filename().string(), ec);
      }
      if (ec) {
        store_.delete_job(job.id);
        fail(ErrorKind::kIo, "cannot copy the checkpoints into {}: {}", dir, ec.message());
      }
    }
  }
  tick();
  return *store_.job(job.id);
}

Job Scheduler::stop(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  if (!job.slurm_id.empty() &&
      (job.state == JobState::kQueued || job.state == JobState::kRunning)) {
    slurm_cancel(job.slurm_id);  // Slurm ends it (143, as SIGTERM); refresh_slurm sees it
    job.stop_requested = true;
    job.state = JobState::kStopping;
  } else if (job.state == JobState::kQueued) {
    job.state = JobState::kEnded;
    job.stop_requested = true;
    job.exit_code = 143;  // as if SIGTERM had ended it
    job.ended = std::time(nullptr);
  } else if (job.state == JobState::kRunning) {
    job.stop_requested = true;
    job.state = JobState::kStopping;
    if (job.pid > 0) ::kill(job.pid, SIGTERM);
  }
  store_.update_job(job);
  return job;
}

void Scheduler::snapshot(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  DDPX_CHECK(job.state == JobState::kRunning && (job.pid > 0 || !job.slurm_id.empty()),
             ErrorKind::kUsage, "job {} is {}; only a running job can take a snapshot", id,
             job_state_name(job.state));
  std::vector<std::string> command = job.command;  // as it runs: with the service's --save_dir
  if (is_train_command(command))
    command.push_back("--save_dir=" + job_checkpoints_dir(options_.state_dir, id));
  std::string refusal = launch::snapshot_refusal(command);
  DDPX_CHECK(refusal.empty(), ErrorKind::kUsage, "job {} {}", id, refusal);
  if (!job.slurm_id.empty()) {
    slurm_cancel(job.slurm_id, "USR1");  // to every task (not the batch shell)
    return;
  }
  DDPX_CHECK(::kill(job.pid, SIGUSR1) == 0, ErrorKind::kIo, "cannot signal job {} (pid {}): {}", id,
             job.pid, std::strerror(errno));
}

Job Scheduler::restart(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  DDPX_CHECK(job.state == JobState::kEnded, ErrorKind::kUsage,
             "job {} is {}; only an ended job can be restarted (stop it first)", id,
             job_state_name(job.state));
  job.state = JobState::kQueued;
  job.stop_requested = false;
  job.exit_code = 0;
  job.pid = 0;
  job.slots.clear();
  job.ports.clear();
  job.started = job.ended = 0;
  job.slurm_id.clear();
  job.slurm_state.clear();
  store_.update_job(job);
  return job;
}

void Scheduler::tick() {
  std::lock_guard<std::mutex> lock(mutex_);
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
  if (uses_slurm()) refresh_slurm();
  start_fitting();
}

void Scheduler::refresh_running() {
  std::vector<launch::JobRecord> records = launch::read_jobs(options_.state_dir + "/jobs");
  for (JobState state : {JobState::kRunning, JobState::kStopping}) {
    for (Job& job : store_.jobs_in(state)) {
      if (!job.slurm_id.empty()) continue;  // refresh_slurm's
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

void Scheduler::start_fitting() {
  std::set<int> used;
  std::map<std::string, int> held;
  for (JobState state : {JobState::kRunning, JobState::kStopping}) {
    for (const Job& job : store_.jobs_in(state)) {
      used.insert(job.slots.begin(), job.slots.end());
      held[job.user] += uses_slurm() ? job.workers : static_cast<int>(job.slots.size());
    }
  }
  if (uses_slurm()) {
    // Slurm queues and places; the service keeps only its users' quotas.
    std::vector<Job> queued = store_.jobs_in(JobState::kQueued);
    for (const Job& job : queued)
      if (!job.slurm_id.empty()) held[job.user] += job.workers;
    for (Job& job : queued) {
      if (!job.slurm_id.empty()) continue;
      if (options_.user_quota > 0 && held[job.user] + job.workers > options_.user_quota) continue;
      held[job.user] += job.workers;
      submit_to_slurm(job);
    }
    return;
  }
  std::vector<int> all;
  for (int i = 0; i < total_slots(); ++i)
    all.push_back(options_.gpus.empty() ? i : options_.gpus[static_cast<size_t>(i)]);
  for (Job& job : store_.jobs_in(JobState::kQueued)) {
    if (options_.user_quota > 0 && held[job.user] + job.workers > options_.user_quota) continue;
    std::vector<int> free;
    for (int slot : all)
      if (!used.count(slot)) free.push_back(slot);
    if (static_cast<int>(free.size()) < job.workers) break;  // first come, first served
    job.slots.assign(free.begin(), free.begin() + job.workers);
    used.insert(job.slots.begin(), job.slots.end());
    held[job.user] += job.workers;
    launch(job);
  }
}

void Scheduler::launch(Job& job) {
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
