// `ddpx run` with real worker processes (small shell scripts): the env contract, logs and
// console, and how the job ends when a worker fails.
#include <gtest/gtest.h>

#include <set>

#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

using test::run_command;
using test::TempDir;

constexpr char kEnvScript[] =
    "env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|"
    "MASTER_PORT|OMP_NUM_THREADS|DDPX_THREADS|DDPX_RESTART_COUNT|CUDA_VISIBLE_DEVICES)=' "
    "> \"$OUT/env.$RANK.tmp\" && mv \"$OUT/env.$RANK.tmp\" \"$OUT/env.$RANK\"\n"
    "echo \"out of rank $RANK\"\n"
    "echo \"err of rank $RANK\" >&2\n";

TEST(LauncherTest, EveryRankGetsTheEnvContract) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  auto result = run_command(ddpx_run(dir, "3 -- " + script), 30);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  int threads = std::max(1, usable_cores() / 3);
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = read_env_file(dir.file("env." + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["OMP_NUM_THREADS"], std::to_string(threads));
    EXPECT_EQ(env["DDPX_THREADS"], std::to_string(threads));
    EXPECT_EQ(env["DDPX_RESTART_COUNT"], "0");
    if (!file_exists("/dev/nvidia0") && !file_exists("/dev/kfd")) {
      EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u) << "no GPU here: nothing to assign";
    }
    ports.insert(env["MASTER_PORT"]);
  }
  ASSERT_EQ(ports.size(), 1u) << "every rank must get the same MASTER_PORT";
  EXPECT_GT(std::stoi(*ports.begin()), 0);
}

TEST(LauncherTest, OmpNumThreadsOfTheLauncherIsKept) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  auto result = run_command("export OMP_NUM_THREADS=5; " + ddpx_run(dir, "2 -- " + script), 30);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(read_env_file(dir.file("env.1"))["OMP_NUM_THREADS"], "5");
  EXPECT_EQ(read_env_file(dir.file("env.1"))["DDPX_THREADS"], "5");
}

TEST(LauncherTest, ThreadsPerWorkerFlagOverridesTheSplit) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  auto result = run_command(ddpx_run(dir, "2 --threads_per_worker 3 -- " + script), 30);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(read_env_file(dir.file("env.1"))["OMP_NUM_THREADS"], "3");
  EXPECT_EQ(read_env_file(dir.file("env.1"))["DDPX_THREADS"], "3");
}

// `ddpx run N` on fewer cores than N, without GPUs: one line says so and how to change it.
TEST(LauncherTest, MoreWorkersThanCoresSaySoInOneLine) {
  if (file_exists("/dev/nvidia0") || file_exists("/dev/kfd")) GTEST_SKIP() << "GPUs here";
  TempDir dir;
  auto over = run_command("cd " + test::shell_quote(dir.path()) + " && exec taskset -c 0 " +
                              test::shell_quote(test::ddpx_binary()) + " run 2 -- true",
                          30);
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("ddpx run: 2 workers on 1 usable core(s) and no GPU: they take "
                             "turns on the cores and every step waits for the slowest; start "
                             "at most 1 (`ddpx run 1 ...`), or give the job more cores\n"),
            std::string::npos)
      << over.output;
  auto fits = run_command("cd " + test::shell_quote(dir.path()) + " && exec taskset -c 0 " +
                              test::shell_quote(test::ddpx_binary()) + " run 1 -- true",
                          30);
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_EQ(fits.output.find("usable core"), std::string::npos) << fits.output;
}

TEST(LauncherTest, ChosenPortIsFreeForRankZeroToBind) {
  TempDir dir;
  // Rank 0 listens on MASTER_PORT like TCPStore does; a port still held fails the bind.
  std::string script = write_script(
      dir, "bind.sh",
      "[ \"$RANK\" != 0 ] && exit 0\n"
      "exec /usr/bin/python3 -c 'import os, socket; s = socket.socket(); "
      "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
      "s.bind((os.environ[\"MASTER_ADDR\"], int(os.environ[\"MASTER_PORT\"]))); s.listen(); "
      "print(\"bound\", os.environ[\"MASTER_PORT\"])'\n");
  auto result = run_command(ddpx_run(dir, "2 -- " + script), 30);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "bound ")) << result.output;
}

TEST(LauncherTest, LogsPerRankStartWithHelloAndConsoleShowsRankZeroAndEveryHello) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  auto result = run_command(ddpx_run(dir, "2 --log_dir logs --job_name hello -- " + script), 30);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "out of rank 0")) << result.output;
  EXPECT_TRUE(contains(result.output, "err of rank 0")) << result.output;
  EXPECT_FALSE(contains(result.output, "out of rank 1")) << result.output;
  // Every rank's hello reaches the console, as the seed printed them.
  EXPECT_TRUE(contains(result.output, "Hello from local_rank 0, global_rank 0\n")) << result.output;
  EXPECT_TRUE(contains(result.output, "Hello from local_rank 1, global_rank 1\n")) << result.output;
  std::string job = job_log_dir(dir.file("logs"));
  ASSERT_TRUE(contains(job, "_hello")) << job;
  // <YYYYmmdd-HHMMSS>_hello
  EXPECT_EQ(std::filesystem::path(job).filename().string().size(), 15u + 6u) << job;
  for (int rank = 0; rank < 2; ++rank) {
    std::string log = slurp(job + "/rank" + std::to_string(rank) + ".log");
    std::string hello = "Hello from local_rank " + std::to_string(rank) + ", global_rank " +
                        std::to_string(rank) + "\n";
    EXPECT_EQ(log.rfind(hello, 0), 0u) << log;
    EXPECT_TRUE(contains(log, "out of rank " + std::to_string(rank))) << log;
    EXPECT_TRUE(contains(log, "err of rank " + std::to_string(rank))) << log;
  }
}

TEST(LauncherTest, TeeAllPrefixesEveryLineAndTeeNoneShowsNoWorkerNorHello) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  auto all = run_command(ddpx_run(dir, "2 --tee all -- " + script), 30);
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_TRUE(contains(all.output, "[rank 0] out of rank 0\n")) << all.output;
  EXPECT_TRUE(contains(all.output, "[rank 1] out of rank 1\n")) << all.output;
  EXPECT_TRUE(contains(all.output, "[rank 1] err of rank 1\n")) << all.output;
  EXPECT_TRUE(contains(all.output, "[rank 1] Hello from local_rank 1, global_rank 1\n"));
  auto none = run_command(ddpx_run(dir, "2 --tee none -- " + script), 30);
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_FALSE(contains(none.output, "of rank")) << none.output;
  EXPECT_FALSE(contains(none.output, "Hello from")) << none.output;
}

// Rank 0 records its pid and its child's, then sleeps; rank 1 waits for that and fails.
std::string failing_job_script(const TempDir& dir, const std::string& how_rank1_fails,
                               const std::string& rank0_prelude = "") {
  return write_script(dir, "job.sh",
                      "if [ \"$RANK\" = 0 ]; then\n" + rank0_prelude +
                          "  sleep 60 &\n"
                          "  echo $! > \"$OUT/child.0\"\n"
                          "  echo $$ > \"$OUT/pid.0\"\n"
                          "  while true; do sleep 0.1; done\n"
                          "fi\n"
                          "while [ ! -s \"$OUT/pid.0\" ]; do sleep 0.05; done\n"
                          "echo \"rank 1 is about to fail\"\n" +
                          how_rank1_fails + "\n");
}

TEST(LauncherTest, FailingWorkerStopsTheOthersAndIsNamed) {
  TempDir dir;
  std::string script = failing_job_script(dir, "exit 3");
  auto result = run_command(ddpx_run(dir, "2 --log_dir logs -- " + script), 10);
  ASSERT_FALSE(result.timed_out) << "the launcher must end the job within 10 s\n" << result.output;
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 1 (local rank 1")) << result.output;
  EXPECT_TRUE(contains(result.output, "exit code 3")) << result.output;
  EXPECT_TRUE(contains(result.output, "  | rank 1 is about to fail")) << "log tail\n"
                                                                      << result.output;
  EXPECT_TRUE(process_gone(read_pid(dir.file("pid.0")))) << "rank 0 survived the job";
  EXPECT_TRUE(process_gone(read_pid(dir.file("child.0")))) << "rank 0's child survived";
}

TEST(LauncherTest, WorkerKilledBySignalStopsTheJob) {
  TempDir dir;
  std::string script = failing_job_script(dir, "kill -9 $$");
  auto result = run_command(ddpx_run(dir, "2 -- " + script), 10);
  ASSERT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 1 (local rank 1")) << result.output;
  EXPECT_TRUE(contains(result.output, "signal 9 (SIGKILL)")) << result.output;
  EXPECT_TRUE(process_gone(read_pid(dir.file("pid.0"))));
  EXPECT_TRUE(process_gone(read_pid(dir.file("child.0"))));
}

TEST(LauncherTest, WorkerIgnoringSigtermIsKilledAfterGrace) {
  TempDir dir;
  std::string script = failing_job_script(dir, "exit 4", "  trap '' TERM\n");
  auto result = run_command(ddpx_run(dir, "2 --grace_s 1 -- " + script), 10);
  ASSERT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0 (pid ")) << result.output;
  EXPECT_TRUE(contains(result.output, "did not stop within --grace_s; sending SIGKILL"))
      << result.output;
  EXPECT_TRUE(process_gone(read_pid(dir.file("pid.0"))));
}

class LauncherSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(LauncherSignalTest, SignalToLauncherStopsEveryWorker) {
  int signal = GetParam();
  TempDir dir;
  std::string script = write_script(dir, "sleepy.sh",
                                    "sleep 60 &\n"
                                    "echo $! > \"$OUT/child.$RANK\"\n"
                                    "echo $$ > \"$OUT/pid.$RANK\"\n"
                                    "wait\n");
  pid_t launcher = start_in_background(ddpx_run(dir, "2 -- " + script), dir.file("console"));
  ASSERT_TRUE(wait_for_file(dir.file("pid.0"), 10) && wait_for_file(dir.file("pid.1"), 10))
      << slurp(dir.file("console"));
  ASSERT_TRUE(wait_for_file(dir.file("child.1"), 10));
  ::kill(launcher, signal);
  int code = wait_exit_code(launcher, 10);
  EXPECT_EQ(code, 128 + signal) << slurp(dir.file("console"));
  for (const char* name : {"pid.0", "pid.1", "child.0", "child.1"}) {
    EXPECT_TRUE(process_gone(read_pid(dir.file(name)))) << name << " is still running";
  }
}

INSTANTIATE_TEST_SUITE_P(IntAndTerm, LauncherSignalTest, ::testing::Values(SIGINT, SIGTERM));

TEST(LauncherTest, WorkersDieWhenTheLauncherIsKilled) {
  TempDir dir;
  std::string script = write_script(dir, "sleepy.sh",
                                    "echo $$ > \"$OUT/pid.$RANK\"\n"
                                    "exec sleep 60\n");
  pid_t launcher = start_in_background(ddpx_run(dir, "2 -- " + script), dir.file("console"));
  ASSERT_TRUE(wait_for_file(dir.file("pid.0"), 10) && wait_for_file(dir.file("pid.1"), 10))
      << slurp(dir.file("console"));
  ::kill(launcher, SIGKILL);  // no chance to clean up: only PR_SET_PDEATHSIG can act
  EXPECT_EQ(wait_exit_code(launcher, 10), 128 + SIGKILL);
  EXPECT_TRUE(process_gone(read_pid(dir.file("pid.0"))));
  EXPECT_TRUE(process_gone(read_pid(dir.file("pid.1"))));
}

TEST(LauncherTest, TwoJobsStartedTogetherGetDifferentPorts) {
  TempDir dir;
  std::string script = write_script(dir, "port.sh",
                                    "echo $MASTER_PORT > \"$OUT/port.$JOB.$RANK\"\n"
                                    "sleep 1\n");
  std::string a = "export JOB=a; " + ddpx_run(dir, "2 -- " + script);
  std::string b = "export JOB=b; " + ddpx_run(dir, "2 -- " + script);
  auto result = run_command("(" + a + ") & (" + b + ") & wait", 30);
  ASSERT_FALSE(result.timed_out) << result.output;
  std::string port_a = slurp(dir.file("port.a.0"));
  std::string port_b = slurp(dir.file("port.b.0"));
  ASSERT_FALSE(port_a.empty() || port_b.empty()) << result.output;
  EXPECT_EQ(port_a, slurp(dir.file("port.a.1")));
  EXPECT_NE(port_a, port_b);
}

TEST(LauncherTest, TwoNodesOnLoopbackGiveGlobalRanksZeroToThree) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  std::string port = std::to_string(test::free_port());
  std::string common =
      "--nnodes 2 --master_addr 127.0.0.1 --master_port " + port + " --log_dir logs --job_name mn";
  std::string node0 = ddpx_run(dir, "2 " + common + " --node_rank 0 -- " + script);
  std::string node1 = ddpx_run(dir, "2 " + common + " --node_rank 1 -- " + script);
  auto result = run_command("(" + node0 + ") & (" + node1 + ") & wait", 30);
  ASSERT_FALSE(result.timed_out) << result.output;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_file(dir.file("env." + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank)) << result.output;
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_PORT"], port);
  }
  // Both nodes log into the same job folder here (same second, same --job_name) or two.
  int logs = 0;
  for (const auto& job : std::filesystem::directory_iterator(dir.file("logs"))) {
    for (const auto& file : std::filesystem::directory_iterator(job.path())) {
      (void)file;
      ++logs;
    }
  }
  EXPECT_EQ(logs, 4);
}

// The identical command on every node (no --node_rank): ranks are assigned at rendezvous.
TEST(LauncherTest, IdenticalCommandsOnTwoNodesGetNodeRanksAtRendezvous) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  std::string node =
      ddpx_run(dir, "2 --nnodes 2 --master_addr 127.0.0.1 --master_port " +
                        std::to_string(test::free_port()) + " --log_dir logs -- " + script);
  auto result = run_command("(" + node + ") & (" + node + ") & wait", 60);
  ASSERT_FALSE(result.timed_out) << result.output;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_file(dir.file("env." + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank)) << result.output;
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2)) << result.output;
    EXPECT_EQ(env["WORLD_SIZE"], "4");
  }
  EXPECT_TRUE(contains(result.output, "node rank 0 of 2 nodes, assigned at rendezvous"))
      << result.output;
  EXPECT_TRUE(contains(result.output, "node rank 1 of 2 nodes, assigned at rendezvous"))
      << result.output;
}

// --nnodes auto: the job is as many nodes as join before a quiet --rdzv_last_call.
TEST(LauncherTest, AutoNodeCountIsTheNodesThatJoin) {
  TempDir dir;
  std::string script = write_script(dir, "env.sh", kEnvScript);
  std::string node =
      ddpx_run(dir, "1 --nnodes auto --rdzv_last_call 2 --master_addr 127.0.0.1 --master_port " +
                        std::to_string(test::free_port()) + " --log_dir logs -- " + script);
  auto result = run_command("(" + node + ") & (" + node + ") & (" + node + ") & wait", 60);
  ASSERT_FALSE(result.timed_out) << result.output;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = read_env_file(dir.file("env." + std::to_string(rank)));
    EXPECT_EQ(env["WORLD_SIZE"], "3") << result.output;
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank)) << result.output;
  }
}

// Nodes that disagree are refused naming both values; a job that never fills ends in time.
TEST(LauncherTest, NodesThatDisagreeOrNeverComeEndTheRendezvousWithOneLine) {
  TempDir dir;
  std::string port = std::to_string(test::free_port());
  auto node = [&](const std::string& nnodes) {
    return ddpx_run(dir, "1 --nnodes " + nnodes + " --rdzv_timeout 4 --master_addr 127.0.0.1 " +
                             "--master_port " + port + " --log_dir logs -- true");
  };
  // Each node in a subshell of its own (ddpx_run ends in exec), its exit code echoed after.
  auto result = run_command("( (" + node("2") + "); echo \"exit $?\") & (sleep 0.5; (" + node("3") +
                                "); echo \"exit $?\") & wait",
                            60);
  ASSERT_FALSE(result.timed_out) << result.output;
  EXPECT_TRUE(contains(result.output, "--nnodes 3 on ") &&
              contains(result.output, " but 2 on node 0"))
      << result.output;
  EXPECT_TRUE(contains(result.output, "formed no job in 4 s (--rdzv_timeout): 1 of 2 node(s)"))
      << result.output;
  EXPECT_TRUE(contains(result.output, "exit 2")) << "the refused node: a usage error\n"
                                                 << result.output;
  EXPECT_TRUE(contains(result.output, "exit 1")) << "node 0 timed out\n" << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs"))) << "no worker may start";
}

TEST(LauncherTest, FailedJobIsRestartedWithRestartCount) {
  TempDir dir;
  std::string script = write_script(dir, "flaky.sh",
                                    "echo \"attempt $DDPX_RESTART_COUNT\"\n"
                                    "[ \"$DDPX_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ] && "
                                    "exit 5\n"
                                    "exit 0\n");
  auto result = run_command(ddpx_run(dir, "2 --max_restarts 2 --log_dir logs -- " + script), 30);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "restarting all workers (restart 1 of 2)")) << result.output;
  std::string log = slurp(job_log_dir(dir.file("logs")) + "/rank1.log");
  EXPECT_TRUE(contains(log, "attempt 0") && contains(log, "attempt 1")) << log;
  auto no_restart = run_command(ddpx_run(dir, "2 -- " + script), 30);
  EXPECT_EQ(no_restart.exit_code, 5) << no_restart.output;
}

TEST(LauncherTest, DdpxSubcommandRunsThisBinary) {
  TempDir dir;
  auto dry = run_command(ddpx_run(dir, "2 --dry_run -- train --epochs 1"), 30);
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_TRUE(contains(dry.output, test::ddpx_binary() + " train --epochs 1\n")) << dry.output;
  EXPECT_TRUE(contains(dry.output, "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2")) << dry.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("log"))) << "a dry run starts nothing";
  // For real: each worker is `ddpx run 1 --dry_run -- true`, run by this very binary.
  auto nested = run_command(ddpx_run(dir, "1 -- run 1 --dry_run -- true"), 30);
  ASSERT_EQ(nested.exit_code, 0) << nested.output;
  EXPECT_TRUE(contains(nested.output, "[rank 0] RANK=0 ")) << nested.output;
}

TEST(LauncherTest, BadInvocationsAreUsageErrorsBeforeAnythingStarts) {
  TempDir dir;
  auto missing = run_command(ddpx_run(dir, "2 -- no_such_program_ddpx"), 30);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "no_such_program_ddpx")) << missing.output;
  auto zero = run_command(ddpx_run(dir, "0 -- true"), 30);
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  auto no_port = run_command(ddpx_run(dir, "2 --nnodes 2 --master_addr 10.0.0.1 -- true"), 30);
  EXPECT_EQ(no_port.exit_code, 2) << no_port.output;
  EXPECT_TRUE(contains(no_port.output, "--master_port")) << no_port.output;
  auto unresolved = run_command(
      ddpx_run(dir, "1 --nnodes 2 --master_addr no.such.host.invalid --master_port 29555 -- true"),
      30);
  EXPECT_EQ(unresolved.exit_code, 2) << unresolved.output;
  EXPECT_TRUE(contains(unresolved.output, "--master_addr no.such.host.invalid does not resolve"))
      << unresolved.output;
  auto elsewhere = run_command(
      ddpx_run(dir,
               "1 --nnodes 2 --node_rank 0 --master_addr 192.0.2.77 --master_port 29555 -- true"),
      30);
  EXPECT_EQ(elsewhere.exit_code, 2) << elsewhere.output;
  EXPECT_TRUE(contains(elsewhere.output, "--master_addr 192.0.2.77 is not an address of this host"))
      << elsewhere.output;
  EXPECT_TRUE(contains(elsewhere.output, "127.0.0.1")) << "lists this host's addresses";
  auto no_program = run_command(ddpx_run(dir, "2"), 30);
  EXPECT_EQ(no_program.exit_code, 2) << no_program.output;
  if (!file_exists("/dev/nvidia0") && !file_exists("/dev/kfd")) {
    auto gpus = run_command(ddpx_run(dir, "2 --gpus 0,1 -- true"), 30);
    EXPECT_EQ(gpus.exit_code, 2) << gpus.output;
    EXPECT_TRUE(contains(gpus.output, "no GPU")) << gpus.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("log"))) << "nothing may start on bad input";
}

}  // namespace
}  // namespace ddpx::launch::testing
