#include "launch/attempt.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "core/error.h"
#include "core/subprocess.h"
#include "launch/worker_process.h"
#include "trace/collective_report.h"

namespace ddpx::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTailLines = 20;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kPeerWait = std::chrono::seconds(2);  // see Attempt::on_failure
// After the last worker is reaped, programs it started may still hold its pipes open; read
// what they have written for this long, then stop listening.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(300);

struct Worker {
  const WorkerSpec* spec;
  WorkerOutput* output;
  Child process;
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
      if (held_ && !stopping_ && Clock::now() >= held_until_) report_failure(*held_, held_status_);
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
        kill_all("did not stop within --grace_s");
      }
    }
    if (held_ && !stopping_) report_failure(*held_, held_status_);
    finish_output();
    return result_;
  }

 private:
  void start_all() {
    for (Worker& w : workers_) {
      std::string hello = fmt::format("Hello from local_rank {}, global_rank {}\n",
                                      w.spec->local_rank, w.spec->global_rank);
      w.output->write(false, hello.data(), hello.size());
      // Every rank's hello reaches the console, as the original prints them, also for the
      // ranks whose output the console does not show (unless --tee none asked for quiet).
      if (!w.output->console() && options_.tee != Tee::kNone) write_all(STDOUT_FILENO, hello);
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
      if (w.running) signal_group(w.process.pid, signal);
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
      if (!ok && !stopping_) on_failure(w, status);
    }
  }

  // A rank that failed because a peer's connection closed under it (Gloo's "... by peer") is
  // rarely the cause: the peer that closed it usually fails a moment later with the reason. Its
  // report waits up to kPeerWait for another rank to fail first-hand, which is reported instead.
  void on_failure(const Worker& w, int status) {
    bool lost_peer = false;
    for (const std::string& line : w.output->tail(kTailLines))
      lost_peer |= line.find("by peer") != std::string::npos;
    if (!lost_peer) {
      report_failure(w, status);
      return;
    }
    if (held_) return;  // the first of them stands for the rest
    held_ = &w;
    held_status_ = status;
    held_until_ = Clock::now() + kPeerWait;
  }

  void report_failure(const Worker& w, int status) {
    held_ = nullptr;
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
    // on the failure (rank<K>.remote, distributed/trace_exchange.h); the rest are named as missing.
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
      signal_group(w.process.pid, signal);
      // A stopped worker (SIGSTOP, a debugger) acts on the signal only once continued.
      if (signal != SIGKILL) signal_group(w.process.pid, SIGCONT);
    }
    if (signal == SIGKILL) killed_ = true;
  }

  void kill_all(const char* why) {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      say(fmt::format("rank {} (pid {}) {}; sending SIGKILL", w.spec->global_rank, w.process.pid,
                      why));
      signal_group(w.process.pid, SIGKILL);
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
      if (stopping_) signal_group(w.process.pid, SIGKILL);  // leftovers in a failed job's groups
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
  const Worker* held_ = nullptr;  // a failure that lost a peer, reported unless one with a cause
  int held_status_ = 0;           // comes within kPeerWait
  Clock::time_point held_until_;
  Clock::time_point kill_deadline_;
};

}  // namespace

AttemptResult run_attempt(const LaunchOptions& options, const JobPlan& plan,
                          std::vector<WorkerOutput>& outputs, int signal_fd,
                          const std::string& trace_dir) {
  return Attempt(options, plan, outputs, signal_fd, trace_dir).run();
}

void say(const std::string& line) { write_all(STDERR_FILENO, "ddpx run: " + line + "\n"); }

}  // namespace ddpx::launch
