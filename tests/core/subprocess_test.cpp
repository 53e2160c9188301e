// spawn() and run_program(): what a child gets (environment, output, process group, signals,
// descriptors) and what its caller learns (exit code or signal, or why it could not start).
// Each case runs twice: through posix_spawn, and through the fork that a death signal needs.
#include "core/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace ddpx {
namespace {

// Everything a kPipe child writes, until it closes the pipe.
std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 10000);
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;
    }
  }
  ::close(fd);
  return text;
}

SpawnSpec shell(const std::string& script) {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.stdout_to = ChildOutput::kPipe;
  return spec;
}

// The parameter: whether the spec also asks for a death signal, which makes spawn() fork.
class SpawnTest : public ::testing::TestWithParam<bool> {
 protected:
  SpawnSpec with_path(SpawnSpec spec) {
    if (GetParam()) spec.death_signal = SIGKILL;
    return spec;
  }
  // Runs the spec to its end; returns its stdout and sets status_.
  std::string run(const SpawnSpec& spec) {
    Child child = spawn(with_path(spec));
    std::string out = child.out_fd >= 0 ? read_all(child.out_fd) : "";
    status_ = wait_child(child.pid);
    return out;
  }
  int status_ = 0;
};

TEST_P(SpawnTest, ChildSeesTheCallersEnvironmentWithTheSpecsVariablesOverIt) {
  ::setenv("DDPX_SPAWN_TEST_KEPT", "kept", 1);
  ::setenv("DDPX_SPAWN_TEST_SET", "old", 1);
  SpawnSpec spec = shell("echo \"$DDPX_SPAWN_TEST_KEPT $DDPX_SPAWN_TEST_SET $DDPX_SPAWN_NEW\"");
  spec.env = {{"DDPX_SPAWN_TEST_SET", "new"}, {"DDPX_SPAWN_NEW", "added"}};
  EXPECT_EQ(run(spec), "kept new added\n");
  EXPECT_EQ(exit_code_of(status_), 0);
}

TEST_P(SpawnTest, OutputIsAppendedToTheFileWithStderrBesideStdout) {
  std::string path = ::testing::TempDir() + "/spawn_console_" + std::to_string(GetParam());
  std::ofstream(path) << "before\n";
  SpawnSpec spec = shell("echo out; echo err >&2");
  spec.stdout_to = ChildOutput::kFile;
  spec.stderr_to = ChildOutput::kStdout;
  spec.output_file = path;
  run(spec);
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  EXPECT_EQ(text.str(), "before\nout\nerr\n");
}

TEST_P(SpawnTest, StdoutAndStderrPipesAreSeparate) {
  SpawnSpec spec = shell("echo out; echo err >&2");
  spec.stderr_to = ChildOutput::kPipe;
  Child child = spawn(with_path(spec));
  EXPECT_EQ(read_all(child.out_fd), "out\n");
  EXPECT_EQ(read_all(child.err_fd), "err\n");
  wait_child(child.pid);
}

TEST_P(SpawnTest, NewGroupAndNewSessionAreTheChildsOwn) {
  SpawnSpec spec = shell("exec sleep 30");
  spec.stdout_to = ChildOutput::kNull;
  spec.group = ChildGroup::kNewGroup;
  Child grouped = spawn(with_path(spec));
  EXPECT_EQ(::getpgid(grouped.pid), grouped.pid);
  EXPECT_EQ(::getsid(grouped.pid), ::getsid(0)) << "a new group stays in the caller's session";
  spec.group = ChildGroup::kNewSession;
  Child session = spawn(with_path(spec));
  EXPECT_EQ(::getsid(session.pid), session.pid);
  spec.group = ChildGroup::kInherit;
  Child same = spawn(with_path(spec));
  EXPECT_EQ(::getpgid(same.pid), ::getpgid(0));
  signal_group(grouped.pid, SIGTERM);
  signal_group(session.pid, SIGKILL);
  signal_group(same.pid, SIGKILL);  // no group of its own: the pid alone
  EXPECT_EQ(describe_status(wait_child(grouped.pid)), "signal 15 (SIGTERM)");
  wait_child(session.pid);
  wait_child(same.pid);
}

TEST_P(SpawnTest, ExitCodeAndKillingSignalAreReported) {
  run(shell("exit 3"));
  EXPECT_EQ(exit_code_of(status_), 3);
  EXPECT_EQ(describe_status(status_), "exit code 3");
  run(shell("kill -9 $$"));
  EXPECT_EQ(exit_code_of(status_), 137);
  EXPECT_EQ(describe_status(status_), "signal 9 (SIGKILL)");
}

TEST_P(SpawnTest, AProgramThatCannotStartIsAnErrorNamingIt) {
  SpawnSpec spec;
  spec.argv = {"ddpx-no-such-program", "x"};
  try {
    spawn(with_path(spec));
    FAIL() << "spawned a program that is not on PATH";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("cannot run ddpx-no-such-program: not found on PATH"),
              std::string::npos)
        << e.what();
  }
  spec.argv = {"/nonexistent/ddpx-program"};
  try {
    spawn(with_path(spec));
    FAIL() << "spawned a missing path";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot run /nonexistent/ddpx-program: No such file or directory");
  }
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "no child left behind";
}

TEST_P(SpawnTest, SignalDispositionsAndMaskAreTheSpecs) {
  // The caller ignores SIGTERM: exec would keep that; all_signals_default undoes it.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ignore, &old);
  SpawnSpec spec = shell("kill -TERM $$; echo survived");
  EXPECT_EQ(run(spec), "survived\n") << "ignored signals stay ignored by default";
  spec.all_signals_default = true;
  EXPECT_EQ(run(spec), "");
  EXPECT_EQ(describe_status(status_), "signal 15 (SIGTERM)");
  spec.all_signals_default = false;
  spec.default_signals = {SIGTERM};
  EXPECT_EQ(run(spec), "");
  ::sigaction(SIGTERM, &old, nullptr);
  // The child's mask at exec: SIGUSR1 (bit 10) held pending, nothing else.
  SpawnSpec mask = shell("exec grep SigBlk /proc/self/status");
  mask.blocked_signals = std::vector<int>{SIGUSR1};
  EXPECT_EQ(run(mask), "SigBlk:\t0000000000000200\n");
}

TEST_P(SpawnTest, OnlyStandardDescriptorsReachTheChildUnlessAsked) {
  int fd = ::open("/dev/null", O_RDONLY);  // not close-on-exec
  ASSERT_GE(fd, 3);
  SpawnSpec spec = shell("test -e /proc/$$/fd/" + std::to_string(fd) + " && echo open");
  EXPECT_EQ(run(spec), "");
  spec.close_other_fds = false;
  EXPECT_EQ(run(spec), "open\n");
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(PosixSpawnAndFork, SpawnTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fork" : "PosixSpawn"; });

TEST(SpawnSignalsTest, IgnoredSignalsAreIgnoredInTheChild) {
  SpawnSpec spec = shell("kill -USR1 $$; echo survived");
  spec.all_signals_default = true;
  spec.ignored_signals = {SIGUSR1};
  Child child = spawn(spec);
  EXPECT_EQ(read_all(child.out_fd), "survived\n");
  EXPECT_EQ(exit_code_of(wait_child(child.pid)), 0);
}

TEST(SpawnSignalsTest, DeathSignalEndsTheChildWhenTheThreadThatStartedItEnds) {
  SpawnSpec spec = shell("exec sleep 30");
  spec.stdout_to = ChildOutput::kNull;
  spec.death_signal = SIGKILL;
  pid_t pid = -1;
  std::thread([&] { pid = spawn(spec).pid; }).join();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(describe_status(wait_child(pid)), "signal 9 (SIGKILL)");
}

TEST(RunProgramTest, CapturesOrDropsStderrAndReportsTheExitCode) {
  ProgramOutput both = run_program({"sh", "-c", "echo out; echo err >&2; exit 4"});
  EXPECT_EQ(both.output, "out\nerr");
  EXPECT_EQ(both.exit_code, 4);
  ProgramOutput out =
      run_program({"sh", "-c", "echo out; echo err >&2"}, 30, ProgramStderr::kDropped);
  EXPECT_EQ(out.output, "out");
}

TEST(RunProgramTest, AMissingProgramIsExitCode127WithTheReason) {
  ProgramOutput missing = run_program({"ddpx-no-such-program"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.output.find("cannot run ddpx-no-such-program"), std::string::npos);
  EXPECT_EQ(run_program({"ddpx-no-such-program"}, 30, ProgramStderr::kDropped).output, "");
}

TEST(RunProgramTest, AProgramPastItsTimeoutIsKilled) {
  ProgramOutput slow = run_program({"sleep", "30"}, 1);
  EXPECT_EQ(slow.exit_code, 137);
  EXPECT_NE(slow.output.find("killed after 1 s"), std::string::npos);
}

}  // namespace
}  // namespace ddpx
