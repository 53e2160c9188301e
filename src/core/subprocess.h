// Starting child processes: the one place where ddpx forks or spawns (workers of `ddpx run`,
// the shell of `ddpx shell`, the service's `ddpx run` per job, and short-lived tools such as
// sbatch, scontrol and nvidia-smi).
//
// spawn() starts a long-running child as a SpawnSpec says and returns its pid; the caller waits
// for it (wait_child, or its own waitpid loop). It uses posix_spawn (no shell, nothing of the
// caller's but what the spec names, safe in a process whose other threads allocate and fork)
// unless the spec asks for what posix_spawn cannot do: a death signal (PR_SET_PDEATHSIG) or a
// signal ignored in the child. Then it forks, and the child makes only async-signal-safe calls
// before exec; every signal is blocked across the fork so the child never runs a handler of
// the caller's. Either way a program that cannot be started is an Error from spawn(), never a
// child that exits 127.
//
// run_program() runs a short-lived program to completion and captures what it prints.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpx {

// Where a child's stdout or stderr goes.
enum class ChildOutput {
  kInherit,  // this process's
  kNull,     // /dev/null
  kPipe,     // a pipe whose read end Child holds
  kFile,     // SpawnSpec::output_file, appended to (created 0644)
  kStdout,   // stderr only: wherever stdout goes
};

enum class ChildGroup {
  kInherit,     // this process's group and session
  kNewGroup,    // a process group of its own (pgid = pid): a signal to -pid reaches its children
  kNewSession,  // setsid(): no controlling terminal; outlives this process's session
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] included
  std::string program;            // a path, or a name looked up on PATH; empty: argv[0]
  std::vector<std::pair<std::string, std::string>> env;  // set over this process's environment
  bool stdin_null = true;                                // false: shares this process's stdin
  ChildOutput stdout_to = ChildOutput::kInherit;
  ChildOutput stderr_to = ChildOutput::kInherit;
  std::string output_file;  // for kFile
  ChildGroup group = ChildGroup::kInherit;
  bool close_other_fds = true;  // only 0, 1 and 2 reach the child
  // Dispositions at exec. Exec resets handled signals to default by itself but keeps ignored
  // ones ignored (nohup's SIGHUP, the launcher's SIGPIPE): these undo that.
  bool all_signals_default = false;
  std::vector<int> default_signals;
  std::vector<int> ignored_signals;  // ignored in the child (forks)
  // The child's signal mask at exec; nullopt keeps the caller's. A blocked signal stays
  // pending across exec until the program unblocks it.
  std::optional<std::vector<int>> blocked_signals;
  int death_signal = 0;  // sent to the child when the thread that spawned it ends (forks)
};

struct Child {
  pid_t pid = -1;   // with kNewGroup or kNewSession, also its process group id
  int out_fd = -1;  // kPipe read ends: non-blocking, close-on-exec; the caller closes them
  int err_fd = -1;
};

// Throws kUsage when the program cannot be run (not on PATH, not executable), naming it and
// why; kIo when a pipe, the output file or the fork fails.
Child spawn(const SpawnSpec& spec);

// Waits for pid to end (retrying on EINTR) and returns its waitpid status.
int wait_child(pid_t pid);

// A shell's exit code for a waitpid status: the code, or 128+N when signal N ended it.
int exit_code_of(int status);

// "exit code 3" or "signal 9 (SIGKILL)" for a waitpid status.
std::string describe_status(int status);

// Sends signal to pid's process group, or to pid alone when it has no group of its own.
void signal_group(pid_t pid, int signal);

struct ProgramOutput {
  int exit_code = 0;   // 128+N when signal N ended it; 127 when it could not start
  std::string output;  // stdout (and stderr, when captured), interleaved as written
};

enum class ProgramStderr { kCaptured, kDropped };

// argv[0] is looked up on PATH. A program still running after timeout_s is killed (exit 137).
// Why a program could not start is in output when stderr is captured.
ProgramOutput run_program(const std::vector<std::string>& argv, int timeout_s = 30,
                          ProgramStderr stderr_is = ProgramStderr::kCaptured);

}  // namespace ddpx
