// Helpers for the launcher's process tests: worker scripts written into a TempDir, the
// `ddpx run` command line, pid files and "is this process gone" checks.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "support/support.h"

namespace ddpx::launch::testing {

// Writes an executable /bin/sh script; returns its path.
inline std::string write_script(const test::TempDir& dir, const std::string& name,
                                const std::string& body) {
  std::string path = dir.file(name);
  test::write_bytes(path, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

// `cd <dir> && exec ddpx run <args>` with OUT=<dir> exported: workers write their files into
// $OUT. The shell execs the launcher, so the shell's pid is the launcher's.
inline std::string ddpx_run(const test::TempDir& dir, const std::string& args) {
  return "cd " + test::shell_quote(dir.path()) + " && export OUT=" + test::shell_quote(dir.path()) +
         " && exec " + test::shell_quote(test::ddpx_binary()) + " run " + args;
}

inline bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// KEY=VALUE lines of a file (e.g. written by `env`).
inline std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Waits up to timeout_s for a file to appear (a worker writing its pid).
inline bool wait_for_file(const std::string& path, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (file_exists(path) && !slurp(path).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline pid_t read_pid(const std::string& path) {
  return static_cast<pid_t>(std::stol(slurp(path)));
}

// A process is gone when it no longer exists or is a zombie nobody reaped yet (its reaper
// may be a container's init). Waits up to timeout_s for it to go.
inline bool process_gone(pid_t pid, double timeout_s = 3.0) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    if (::kill(pid, 0) != 0) return true;
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    size_t close_paren = stat.rfind(')');
    if (close_paren != std::string::npos && stat.size() > close_paren + 2 &&
        stat[close_paren + 2] == 'Z') {
      return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The one job folder under log_dir (log_dir/<timestamp>_<job>/).
inline std::string job_log_dir(const std::string& log_dir) {
  std::string found;
  for (const auto& entry : std::filesystem::directory_iterator(log_dir)) {
    found = entry.path().string();
  }
  return found;
}

inline int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  ::sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Starts `command` under /bin/sh in its own process group; output goes to `log`.
inline pid_t start_in_background(const std::string& command, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    std::string line = command + " > " + test::shell_quote(log) + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// waitpid with a deadline; -1 when it did not exit in time (then it is killed).
inline int wait_exit_code(pid_t pid, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace ddpx::launch::testing
