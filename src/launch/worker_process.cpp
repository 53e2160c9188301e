#include "launch/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace ddpx::launch {
namespace {

// argv/envp as NULL-terminated char* arrays, built before fork: the child of a process that
// may have threads must only call async-signal-safe functions until exec.
struct CStrings {
  std::vector<std::string> storage;
  std::vector<char*> pointers;
  char** data() {
    pointers.clear();
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers.data();
  }
};

CStrings worker_environment(const WorkerSpec& spec) {
  CStrings env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : spec.env) overridden = overridden || kv.first == name;
    if (!overridden) env.storage.push_back(entry);
  }
  for (const auto& [name, value] : spec.env) env.storage.push_back(name + "=" + value);
  return env;
}

void child_write(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

}  // namespace

WorkerProcess spawn_worker(const WorkerSpec& spec) {
  CStrings argv;
  argv.storage = spec.argv;
  CStrings envp = worker_environment(spec);
  char** argv_data = argv.data();
  char** envp_data = envp.data();
  int out_pipe[2], err_pipe[2];
  DDPX_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0, ErrorKind::kIo, "pipe failed: {}",
             std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    fail(ErrorKind::kIo, "pipe failed: {}", std::strerror(errno));
  }
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(1);  // the launcher died before the prctl took hold
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; exec keeps ignored signals ignored
    sigset_t mask;
    sigemptyset(&mask);
    if (spec.holds_snapshot_signals_at_start) {
      // Blocked signals stay pending across exec: the worker takes them once its handlers
      // are in (train/snapshot_request.h), so an early request is neither fatal nor lost.
      sigaddset(&mask, SIGUSR1);
      sigaddset(&mask, SIGUSR2);
    }
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);  // dup2 clears close-on-exec on the copies
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execve(spec.path.c_str(), argv_data, envp_data);
    child_write("ddpx run: cannot execute ");
    child_write(spec.path.c_str());
    child_write(": ");
    child_write(std::strerror(errno));
    child_write("\n");
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    fail(ErrorKind::kIo, "fork failed starting rank {}: {}", spec.global_rank,
         std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
  ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  return WorkerProcess{pid, out_pipe[0], err_pipe[0]};
}

void signal_worker(pid_t pid, int signal) {
  if (pid <= 0) return;
  if (::kill(-pid, signal) != 0) ::kill(pid, signal);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = ::sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "status " + std::to_string(status);
}

}  // namespace ddpx::launch
