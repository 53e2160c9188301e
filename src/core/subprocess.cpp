#include "core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace ddpx {
namespace {

// A descriptor this process owns until it hands it on: nothing leaks when spawn() throws.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    reset();
    fd_ = other.release();
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Fd open_or_throw(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  return Fd(fd);
}

// A pipe whose read end is non-blocking; both ends close-on-exec (dup2 clears it on the copy).
void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  DDPX_CHECK(::pipe2(fds, O_CLOEXEC) == 0, ErrorKind::kIo, "pipe failed: {}", std::strerror(errno));
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
}

// NULL-terminated char* arrays, made before a fork: after it, the child of a process with
// threads may only make async-signal-safe calls (a malloc could wait forever on a lock that
// another thread held at the fork).
struct CStrings {
  explicit CStrings(std::vector<std::string> words) : storage(std::move(words)) {
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> storage;
  std::vector<char*> pointers;
};

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : overrides) overridden = overridden || kv.first == name;
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// A name without '/' is looked up on PATH here, not in the child, so its absence is an error
// with a message rather than an exit code.
std::string resolve(const std::string& name) {
  DDPX_CHECK(!name.empty(), ErrorKind::kUsage, "cannot run an empty program name");
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = std::min(dirs.find(':', start), dirs.size());
    std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    if (is_executable_file(dir + "/" + name)) return dir + "/" + name;
    start = end + 1;
  }
  fail(ErrorKind::kUsage, "cannot run {}: not found on PATH ({}); install it or give its path",
       name, dirs);
}

// Everything the child does, made before the fork or the spawn.
struct Plan {
  std::string program;
  int targets[3] = {-1, -1, -1};  // what fds 0, 1 and 2 become; -1 keeps the caller's
  sigset_t defaults, ignored, mask;
  bool set_mask = false;
};

pid_t posix_spawn_child(const SpawnSpec& spec, Plan& plan, char** argv, char** envp) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd) {
    if (plan.targets[fd] >= 0) posix_spawn_file_actions_adddup2(&actions, plan.targets[fd], fd);
  }
  if (spec.close_other_fds) posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGDEF;
  posix_spawnattr_setsigdefault(&attr, &plan.defaults);
  if (plan.set_mask) {
    posix_spawnattr_setsigmask(&attr, &plan.mask);
    flags |= POSIX_SPAWN_SETSIGMASK;
  }
  if (spec.group == ChildGroup::kNewGroup) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  } else if (spec.group == ChildGroup::kNewSession) {
    flags |= POSIX_SPAWN_SETSID;
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, plan.program.c_str(), &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  DDPX_CHECK(rc == 0, rc == EAGAIN || rc == ENOMEM ? ErrorKind::kIo : ErrorKind::kUsage,
             "cannot run {}: {}", plan.program, std::strerror(rc));
  return pid;
}

// The forked child: async-signal-safe calls only. An exec failure's errno goes up exec_fd.
[[noreturn]] void exec_in_child(const SpawnSpec& spec, const Plan& plan, char** argv, char** envp,
                                pid_t parent, const sigset_t& parent_mask, int exec_fd) {
  if (spec.group == ChildGroup::kNewGroup) ::setpgid(0, 0);
  if (spec.group == ChildGroup::kNewSession) ::setsid();
  if (spec.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, spec.death_signal);
    if (::getppid() != parent) ::_exit(1);  // the parent died before the prctl took hold
  }
  for (int fd = 0; fd < 3; ++fd) {
    if (plan.targets[fd] >= 0) ::dup2(plan.targets[fd], fd);
  }
  // The caller's handlers must not run here once signals are unblocked (a stop caught by them
  // would be swallowed): handled signals go to default now, as exec would do a moment later.
  struct sigaction default_action {
  }, ignore_action{};
  default_action.sa_handler = SIG_DFL;
  ignore_action.sa_handler = SIG_IGN;
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signal == SIGKILL || signal == SIGSTOP) continue;
    struct sigaction old {};
    if (::sigaction(signal, nullptr, &old) != 0) continue;
    bool handled = (old.sa_flags & SA_SIGINFO) != 0 ||
                   (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN);
    if (sigismember(&plan.ignored, signal)) {
      ::sigaction(signal, &ignore_action, nullptr);
    } else if (handled || sigismember(&plan.defaults, signal)) {
      ::sigaction(signal, &default_action, nullptr);
    }
  }
  if (spec.close_other_fds) {
    if (exec_fd > 3) ::syscall(SYS_close_range, 3U, static_cast<unsigned>(exec_fd - 1), 0U);
    ::syscall(SYS_close_range, static_cast<unsigned>(exec_fd + 1), ~0U, 0U);
  }
  ::sigprocmask(SIG_SETMASK, plan.set_mask ? &plan.mask : &parent_mask, nullptr);
  ::execve(plan.program.c_str(), argv, envp);
  int error = errno;
  ssize_t ignored = ::write(exec_fd, &error, sizeof(error));
  (void)ignored;
  ::_exit(127);
}

pid_t fork_child(const SpawnSpec& spec, Plan& plan, char** argv, char** envp) {
  Fd exec_read, exec_write;
  make_pipe(exec_read, exec_write);
  ::fcntl(exec_read.get(), F_SETFL, 0);  // blocking: the read below waits for the exec
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) exec_in_child(spec, plan, argv, envp, parent, saved, exec_write.get());
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  exec_write.reset();
  DDPX_CHECK(pid > 0, ErrorKind::kIo, "fork failed starting {}: {}", plan.program,
             std::strerror(fork_errno));
  // Also here, so the group exists before the caller might signal it.
  if (spec.group == ChildGroup::kNewGroup) ::setpgid(pid, pid);
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(exec_read.get(), &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    wait_child(pid);
    fail(ErrorKind::kUsage, "cannot run {}: {}", plan.program, std::strerror(exec_errno));
  }
  return pid;  // end of file: the exec closed the pipe
}

}  // namespace

Child spawn(const SpawnSpec& spec) {
  DDPX_CHECK(!spec.argv.empty(), ErrorKind::kInternal, "spawn: no program");
  DDPX_CHECK(spec.stdout_to != ChildOutput::kStdout, ErrorKind::kInternal,
             "spawn: kStdout is for stderr");
  Plan plan;
  plan.program = resolve(spec.program.empty() ? spec.argv[0] : spec.program);
  CStrings argv(spec.argv);
  CStrings envp(environment_with(spec.env));

  Fd in, file, out_read, out_write, err_read, err_write;
  if (spec.stdin_null) in = open_or_throw("/dev/null", O_RDONLY);
  plan.targets[0] = in.get();
  auto target = [&](ChildOutput to, Fd& read_end, Fd& write_end) {
    switch (to) {
      case ChildOutput::kInherit:
        return -1;
      case ChildOutput::kNull:
        write_end = open_or_throw("/dev/null", O_WRONLY);
        break;
      case ChildOutput::kPipe:
        make_pipe(read_end, write_end);
        break;
      case ChildOutput::kFile:
        if (file.get() < 0) file = open_or_throw(spec.output_file, O_WRONLY | O_CREAT | O_APPEND);
        return file.get();
      case ChildOutput::kStdout:
        return plan.targets[1] >= 0 ? plan.targets[1] : STDOUT_FILENO;
    }
    return write_end.get();
  };
  plan.targets[1] = target(spec.stdout_to, out_read, out_write);
  plan.targets[2] = target(spec.stderr_to, err_read, err_write);

  sigemptyset(&plan.defaults);
  if (spec.all_signals_default) sigfillset(&plan.defaults);
  for (int s : spec.default_signals) sigaddset(&plan.defaults, s);
  sigemptyset(&plan.ignored);
  for (int s : spec.ignored_signals) sigaddset(&plan.ignored, s);
  sigemptyset(&plan.mask);
  if (spec.blocked_signals) {
    plan.set_mask = true;
    for (int s : *spec.blocked_signals) sigaddset(&plan.mask, s);
  }

  bool needs_fork = spec.death_signal != 0 || !spec.ignored_signals.empty();
  Child child;
  child.pid = needs_fork
                  ? fork_child(spec, plan, argv.pointers.data(), envp.pointers.data())
                  : posix_spawn_child(spec, plan, argv.pointers.data(), envp.pointers.data());
  child.out_fd = out_read.release();
  child.err_fd = err_read.release();
  return child;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

void signal_group(pid_t pid, int signal) {
  if (pid <= 0) return;
  if (::kill(-pid, signal) != 0) ::kill(pid, signal);
}

ProgramOutput run_program(const std::vector<std::string>& argv, int timeout_s,
                          ProgramStderr stderr_is) {
  SpawnSpec spec;
  spec.argv = argv;
  spec.stdout_to = ChildOutput::kPipe;
  spec.stderr_to =
      stderr_is == ProgramStderr::kCaptured ? ChildOutput::kStdout : ChildOutput::kNull;
  // The program starts with default signal handling and an empty mask, whatever the caller set.
  spec.all_signals_default = true;
  spec.blocked_signals = std::vector<int>{};
  ProgramOutput result;
  Child child;
  try {
    child = spawn(spec);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUsage) throw;
    result.exit_code = 127;
    if (stderr_is == ProgramStderr::kCaptured) result.output = e.what();
    return result;
  }
  Fd out(child.out_fd);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool killed = false;
  char buffer[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      ::kill(child.pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{out.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready <= 0) continue;
    ssize_t n = ::read(out.get(), buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // end of output: the program (and anything it left running) closed it
    result.output.append(buffer, static_cast<size_t>(n));
  }
  out.reset();
  result.exit_code = exit_code_of(wait_child(child.pid));
  if (killed) result.output += fmt::format("\n(killed after {} s)", timeout_s);
  while (!result.output.empty() && result.output.back() == '\n') result.output.pop_back();
  return result;
}

}  // namespace ddpx
