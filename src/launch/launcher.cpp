#include "launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "core/env.h"
#include "core/error.h"
#include "launch/job_record.h"
#include "launch/plan.h"
#include "launch/port.h"
#include "launch/reservation.h"
#include "launch/worker_output.h"
#include "launch/worker_process.h"
#include "trace/collective_report.h"

namespace ddpx::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTailLines = 20;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// After the last worker is reaped, programs it started may still hold its pipes open; read
// what they have written for this long, then stop listening.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(300);

int g_signal_pipe[2] = {-1, -1};

void on_signal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

// Routes SIGINT/SIGTERM/SIGHUP/SIGCHLD and the snapshot requests SIGUSR1/SIGUSR2 into a pipe the
// event loop polls (a handler may run on any thread, so the loop, not the handler, does the work).
// Restores the old handlers.
class SignalPipe {
 public:
  SignalPipe() {
    DDPX_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, ErrorKind::kIo,
               "pipe failed: {}", std::strerror(errno));
    struct sigaction action {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &action, &old_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);  // a closed console must not kill the job
  }
  ~SignalPipe() {
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  int fd() const { return g_signal_pipe[0]; }

 private:
  static constexpr int kCount = 6;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2};
  struct sigaction old_[kCount] {};
  struct sigaction old_pipe_ {};
};

void say(const std::string& line) { write_all(STDERR_FILENO, "ddpx run: " + line + "\n"); }

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &local);
  return text;
}

struct Worker {
  const WorkerSpec* spec;
  WorkerOutput* output;
  WorkerProcess process;
  bool running = false;
};

// Reads everything available on fd into the worker's output; closes fd at end of file.
void drain(int& fd, bool is_stderr, WorkerOutput& output) {
  char buffer[16384];
  while (fd >= 0) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      output.write(is_stderr, buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        ::close(fd);
        fd = -1;
      }
      return;
    }
  }
}

enum class Outcome { kSuccess, kWorkerFailed, kInterrupted };

struct AttemptResult {
  Outcome outcome = Outcome::kSuccess;
  int exit_code = 0;
};

// One start of all workers, until every one of them has exited.
class Attempt {
 public:
  Attempt(const LaunchOptions& options, const JobPlan& plan, std::vector<WorkerOutput>& outputs,
          int signal_fd, std::string trace_dir)
      : options_(options),
        signal_fd_(signal_fd),
        trace_dir_(std::move(trace_dir)),
        world_size_(plan.world_size) {
    for (size_t i = 0; i < plan.workers.size(); ++i) {
      workers_.push_back(Worker{&plan.workers[i], &outputs[i], {}, false});
    }
  }

  AttemptResult run() {
    start_all();
    while (running_count() > 0) {
      poll_once(kPollInterval);
      reap();
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
        kill_all("did not stop within --grace_s");
      }
    }
    finish_output();
    return result_;
  }

 private:
  void start_all() {
    for (Worker& w : workers_) {
      std::string hello = fmt::format("Hello from local_rank {}, global_rank {}\n",
                                      w.spec->local_rank, w.spec->global_rank);
      w.output->write(false, hello.data(), hello.size());
      try {
        w.process = spawn_worker(*w.spec);
      } catch (const Error&) {
        begin_stop(SIGKILL);
        while (running_count() > 0) {
          poll_once(kPollInterval);
          reap();
        }
        throw;
      }
      w.running = true;
    }
  }

  int running_count() const {
    int count = 0;
    for (const Worker& w : workers_) count += w.running ? 1 : 0;
    return count;
  }

  void poll_once(std::chrono::milliseconds timeout) {
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    std::vector<std::pair<Worker*, bool>> owners{{nullptr, false}};
    for (Worker& w : workers_) {
      if (w.process.out_fd >= 0) {
        fds.push_back({w.process.out_fd, POLLIN, 0});
        owners.emplace_back(&w, false);
      }
      if (w.process.err_fd >= 0) {
        fds.push_back({w.process.err_fd, POLLIN, 0});
        owners.emplace_back(&w, true);
      }
    }
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (ready <= 0) return;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Worker& w = *owners[i].first;
      bool is_stderr = owners[i].second;
      drain(is_stderr ? w.process.err_fd : w.process.out_fd, is_stderr, *w.output);
    }
    if (fds[0].revents != 0) read_signals();
  }

  void read_signals() {
    unsigned char bytes[64];
    ssize_t n;
    while ((n = ::read(signal_fd_, bytes, sizeof(bytes))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        int signal = bytes[i];
        if (signal == SIGCHLD) continue;  // reap() runs after every poll
        on_launcher_signal(signal);
      }
    }
  }

  void on_launcher_signal(int signal) {
    if (signal == SIGUSR1 || signal == SIGUSR2) {
      forward_snapshot_request(signal);
      return;
    }
    if (stopping_) {  // a second Ctrl-C, or a signal while already stopping: no more grace
      kill_all("got a second signal");
      return;
    }
    result_ = {Outcome::kInterrupted, 128 + signal};
    say(fmt::format("got SIG{}; stopping {} worker(s) (SIGKILL after {} s)", ::sigabbrev_np(signal),
                    running_count(), options_.grace_s));
    begin_stop(signal == SIGHUP ? SIGTERM : signal);
  }

  // A snapshot request (train/snapshot_request.h): every worker gets it; they agree on a step.
  void forward_snapshot_request(int signal) {
    if (stopping_) return;
    say(fmt::format("got SIG{}; asking {} worker(s) for a snapshot at their next step{}",
                    ::sigabbrev_np(signal), running_count(),
                    signal == SIGUSR2 ? ", then to stop" : ""));
    for (Worker& w : workers_) {
      if (w.running) signal_worker(w.process.pid, signal);
    }
  }

  void reap() {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      pid_t done = ::waitpid(w.process.pid, &status, WNOHANG);
      if (done != w.process.pid) continue;
      w.running = false;
      // The worker is gone, so everything it wrote is already in its pipes.
      drain(w.process.out_fd, false, *w.output);
      drain(w.process.err_fd, true, *w.output);
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !stopping_) report_failure(w, status);
    }
  }

  void report_failure(const Worker& w, int status) {
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result_ = {Outcome::kWorkerFailed, code};
    constexpr char what[] =
        "rank {} (local rank {}, pid {}) failed with {}; stopping the other {} worker(s)";
    say(fmt::format(what, w.spec->global_rank, w.spec->local_rank, w.process.pid,
                    describe_status(status), running_count()));
    std::string report = fmt::format("ddpx run: last lines of {}:\n", w.output->log_path());
    for (const std::string& line : w.output->tail(kTailLines)) report += "  | " + line + "\n";
    write_all(STDERR_FILENO, report);
    report_collectives();
    begin_stop(SIGTERM);
  }

  // When ranks were waiting in a collective (a timeout, or a peer that died in one), one
  // table of every local rank's last collectives and the verdict (trace/collective_report.h).
  void report_collectives() {
    if (trace_dir_.empty()) return;
    // Every rank of the job: this node's files, and the other nodes' that the workers received
    // on the failure (rank<K>.remote, dist/trace_exchange.h); the rest are named as missing.
    auto ranks = trace::read_traces(trace_dir_, world_size_);
    bool waiting = false;
    for (const auto& s : ranks) {
      for (const auto& e : s.entries) waiting |= e.state != trace::State::kDone;
    }
    if (!waiting) return;
    auto r = trace::make_report(std::move(ranks), world_size_, trace::realtime_ns(), 3,
                                /*this_node_only=*/options_.nnodes > 1);
    say("collectives of every rank (newest last; files in " + trace_dir_ + "/):");
    write_all(STDERR_FILENO, r.table);
    say(r.verdict);
  }

  void begin_stop(int signal) {
    stopping_ = true;
    kill_deadline_ =
        Clock::now() + std::chrono::milliseconds(static_cast<long>(options_.grace_s * 1000));
    for (Worker& w : workers_) {
      if (!w.running) continue;
      signal_worker(w.process.pid, signal);
      // A stopped worker (SIGSTOP, a debugger) acts on the signal only once continued.
      if (signal != SIGKILL) signal_worker(w.process.pid, SIGCONT);
    }
    if (signal == SIGKILL) killed_ = true;
  }

  void kill_all(const char* why) {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      say(fmt::format("rank {} (pid {}) {}; sending SIGKILL", w.spec->global_rank, w.process.pid,
                      why));
      signal_worker(w.process.pid, SIGKILL);
    }
    killed_ = true;
  }

  void finish_output() {
    // Programs the workers started may still hold the pipes: read what they wrote, briefly.
    auto until = Clock::now() + kDrainAfterExit;
    auto any_open = [&] {
      for (const Worker& w : workers_) {
        if (w.process.out_fd >= 0 || w.process.err_fd >= 0) return true;
      }
      return false;
    };
    while (any_open() && Clock::now() < until) poll_once(std::chrono::milliseconds(50));
    for (Worker& w : workers_) {
      if (stopping_) signal_worker(w.process.pid, SIGKILL);  // leftovers in a failed job's groups
      for (int* fd : {&w.process.out_fd, &w.process.err_fd}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
      }
      w.output->finish();
    }
  }

  const LaunchOptions& options_;
  int signal_fd_;
  std::string trace_dir_;
  int world_size_;
  std::vector<Worker> workers_;
  AttemptResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
};

// The job's log folder, LOG_DIR/<timestamp>_<job>, as an absolute path; created by
// open_logs once the plan is known to be good.
std::string log_dir_path(const LaunchOptions& o, const std::string& job_id) {
  return std::filesystem::absolute(o.log_dir + "/" + timestamp() + "_" + job_id).string();
}

void create_log_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DDPX_CHECK(!ec, ErrorKind::kIo, "cannot create the log folder {}: {}; choose another --log_dir",
             dir, ec.message());
}

std::string command_line(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
  return line;
}

// The live `ddpx shell` reservation this launcher runs inside ($DDPX_JOB), if any: its
// devices are already the visible ones and its port is the job's.
std::optional<JobRecord> enclosing_shell() {
  auto id = env::get("DDPX_JOB");
  if (!id || id->empty()) return std::nullopt;
  for (JobRecord& r : live_jobs(jobs_dir(/*for_writing=*/false))) {
    if (r.id == *id && r.kind == "shell") return r;
  }
  return std::nullopt;
}

// Starts the plan's workers (again after a failure, up to --max_restarts) and returns the
// job's exit code.
// Creates the log folder and opens every worker's rankK.log in it.
void open_logs(const LaunchOptions& options, const JobPlan& plan, const std::string& log_dir,
               std::vector<WorkerOutput>& outputs) {
  create_log_dir(log_dir);
  outputs.clear();
  for (const WorkerSpec& w : plan.workers) {
    bool console = options.tee == Tee::kAll || (options.tee == Tee::kFirst && w.local_rank == 0);
    std::string prefix = options.tee == Tee::kAll ? fmt::format("[rank {}] ", w.global_rank) : "";
    outputs.emplace_back(fmt::format("{}/rank{}.log", log_dir, w.global_rank), console, prefix);
  }
}

int supervise(const LaunchOptions& options, JobPlan& plan, const std::string& log_dir,
              std::vector<WorkerOutput>& outputs, std::optional<PortReservation>& port_hold) {
  SignalPipe signals;
  if (port_hold) port_hold->release_probe();  // rank 0's TCPStore binds the port next
  for (int restart = 0;; ++restart) {
    set_restart_count(plan, restart);
    if (options.nnodes == 1)
      set_store_file(plan, fmt::format("{}/rendezvous.{}", log_dir, restart));
    std::string trace_dir = fmt::format("{}/trace.{}", log_dir, restart);
    set_trace_dir(plan, trace_dir);
    AttemptResult result = Attempt(options, plan, outputs, signals.fd(), trace_dir).run();
    if (result.outcome == Outcome::kSuccess) return 0;
    if (result.outcome == Outcome::kWorkerFailed && restart < options.max_restarts) {
      say(fmt::format("restarting all workers (restart {} of {})", restart + 1,
                      options.max_restarts));
      continue;
    }
    say(fmt::format("stopped all workers; exiting with code {}", result.exit_code));
    return result.exit_code;
  }
}

}  // namespace

int run_job(const LaunchOptions& options) {
  validate(options);
  if (options.nnodes > 1) check_master_addr(options.master_addr, options.node_rank == 0);
  HostInfo host = probe_host();
  std::optional<JobRecord> shell = enclosing_shell();
  std::optional<PortReservation> port_hold;
  int port = options.master_port;
  if (port == 0 && shell) port = shell->port;
  if (port == 0) {
    port_hold.emplace(PortReservation::pick());
    port = port_hold->port();
  }
  if (options.dry_run) {
    write_all(STDOUT_FILENO, describe(make_plan(options, host, port)));
    return 0;
  }

  // Reserve this node's GPUs host-wide (reservation.h), unless a `ddpx shell` already has.
  JobPlan plan;
  std::string job_id = options.job_name.empty() ? new_job_id() : options.job_name;
  std::string log_dir = log_dir_path(options, job_id);
  std::vector<WorkerOutput> outputs;
  auto choose_devices = [&](const std::vector<JobRecord>& live) {
    HostInfo usable = host;
    if (options.gpus.empty() && host.gpus.vendor != GpuVendor::kNone)
      usable.gpus.ids = free_devices(host.gpus.ids, options.nproc_per_node, live);
    plan = make_plan(options, usable, port);
    if (!options.gpus.empty()) check_devices_free(plan.gpu_ids, live);
    // Before the record is published: whoever sees the job in `ddpx jobs` finds its logs.
    open_logs(options, plan, log_dir, outputs);
    return plan.gpu_ids;
  };
  std::optional<HostReservation> reservation;
  if (shell) {
    plan = make_plan(options, host, port);
    open_logs(options, plan, log_dir, outputs);
  } else {
    JobRecord draft;
    // Each node of a job has its own record: tests run several nodes on one host.
    draft.id = options.nnodes == 1 ? job_id : fmt::format("{}-node{}", job_id, options.node_rank);
    draft.kind = "run";
    draft.device_variable =
        host.gpus.vendor == GpuVendor::kNone ? "" : visible_devices_variable(host.gpus.vendor);
    draft.port = port;
    draft.workers = options.nproc_per_node;
    draft.log_dir = log_dir;
    draft.command = command_line(options.command);
    reservation.emplace(HostReservation::acquire(std::move(draft), choose_devices));
  }
  constexpr char start[] =
      "job {}: {} worker(s) on node {} of {} (world size {}), master {}:{}, {} thread(s) each, "
      "logs in {}/";
  say(fmt::format(start, job_id, plan.workers.size(), options.node_rank, options.nnodes,
                  plan.world_size, plan.master_addr, plan.master_port, plan.threads_per_worker,
                  log_dir));
  if (auto note = oversubscription_note(plan, host); !note.empty()) say(note);
  int exit_code = supervise(options, plan, log_dir, outputs, port_hold);
  if (reservation) reservation->finish(exit_code);
  return exit_code;
}

}  // namespace ddpx::launch
