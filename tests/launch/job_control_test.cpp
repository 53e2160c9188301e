// `ddpx jobs`, `ddpx logs`, `ddpx stop` and `ddpx shell` on real launchers and shells, each
// test with its own job folder (DDPX_JOBS_DIR) so that other tests' jobs do not show.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "launch/job_record.h"
#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

using test::run_command;
using test::shell_quote;
using test::TempDir;

class JobControlTest : public ::testing::Test {
 protected:
  // `ddpx ARGS` with this test's job folder.
  std::string ddpx(const std::string& args) const {
    return "DDPX_JOBS_DIR=" + shell_quote(dir_.file("jobs")) + " " + test::ddpx_command(args);
  }
  nlohmann::json jobs(const std::string& flags = "") const {
    auto result = run_command(ddpx("jobs --json " + flags), 30);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(result.output);
  }
  // Waits until `count` jobs are running.
  nlohmann::json wait_for_jobs(size_t count) const {
    for (int i = 0; i < 200; ++i) {
      auto list = jobs();
      if (list.size() >= count) return list;
      ::usleep(50 * 1000);
    }
    ADD_FAILURE() << "fewer than " << count << " jobs appeared";
    return nlohmann::json::array();
  }
  // A `ddpx run N` of a worker that prints `tick K` every 0.1 s, `ticks` times.
  pid_t start_job(const std::string& name, int workers, int ticks) {
    std::string script = write_script(dir_, "ticker.sh",
                                      "i=0; while [ $i -lt " + std::to_string(ticks) +
                                          " ]; do echo \"tick $i\"; i=$((i+1)); sleep 0.1; done\n");
    std::string command = "cd " + shell_quote(dir_.path()) + " && exec env " +
                          ddpx("run " + std::to_string(workers) + " --log_dir logs -- " + script);
    return start_in_background(command, dir_.file(name + ".console"));
  }
  TempDir dir_;
};

TEST_F(JobControlTest, JobsStartedTogetherAreListedWithTheirOwnPortsAndStopCleanly) {
  pid_t first = start_job("a", 2, 600);
  pid_t second = start_job("b", 1, 600);
  auto list = wait_for_jobs(2);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_NE(list[0]["id"], list[1]["id"]);
  EXPECT_NE(list[0]["port"], list[1]["port"]) << "two jobs on one host got the same port";
  std::set<int> pids = {list[0]["pid"].get<int>(), list[1]["pid"].get<int>()};
  EXPECT_EQ(pids, (std::set<int>{first, second})) << "the record's pid is the launcher's";
  for (const auto& job : list) {
    EXPECT_EQ(job["state"], "running");
    EXPECT_EQ(job["user"], user_name(static_cast<int>(::getuid())));
    EXPECT_TRUE(file_exists(job["log_dir"].get<std::string>() + "/rank0.log")) << job.dump();
  }
  auto table = run_command(ddpx("jobs"), 30);
  EXPECT_TRUE(contains(table.output, "JOB")) << table.output;
  EXPECT_TRUE(contains(table.output, list[0]["id"].get<std::string>())) << table.output;
  EXPECT_TRUE(contains(table.output, "cpu x2")) << table.output;

  std::string id = list[0]["id"];
  auto stop = run_command(ddpx("stop " + id), 60);
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_TRUE(contains(stop.output, "ddpx stop: job " + id + " ended (exit code 143)"))
      << stop.output;
  pid_t stopped = list[0]["pid"].get<int>();
  EXPECT_EQ(wait_exit_code(stopped == first ? first : second, 10), 143);
  auto after = jobs();
  ASSERT_EQ(after.size(), 1u) << "only the other job still runs: " << after.dump();
  auto again = run_command(ddpx("stop " + id), 30);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_TRUE(contains(again.output, "job " + id + " is not running (it is ended (143))"))
      << again.output;
  run_command(ddpx("stop " + after[0]["id"].get<std::string>()), 60);
  wait_exit_code(stopped == first ? second : first, 10);
  auto all = jobs("--all");
  ASSERT_EQ(all.size(), 2u) << all.dump();
  for (const auto& job : all) EXPECT_EQ(job["state"], "ended") << job.dump();
}

TEST_F(JobControlTest, AKilledLauncherFreesItsReservationAndIsListedAsLost) {
  pid_t launcher = start_job("a", 1, 600);
  auto list = wait_for_jobs(1);
  ASSERT_EQ(list.size(), 1u) << slurp(dir_.file("a.console"));
  ::kill(launcher, SIGKILL);
  wait_exit_code(launcher, 10);
  EXPECT_EQ(jobs().size(), 0u) << "a dead launcher's job is not running";
  auto all = jobs("--all");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["state"], "lost");
  auto stop = run_command(ddpx("stop " + all[0]["id"].get<std::string>()), 30);
  EXPECT_EQ(stop.exit_code, 2) << stop.output;
}

TEST_F(JobControlTest, LogsPrintsARanksLogAndFollowsItUntilTheJobEnds) {
  pid_t launcher = start_job("a", 2, 30);
  auto list = wait_for_jobs(1);
  ASSERT_EQ(list.size(), 1u);
  std::string id = list[0]["id"];
  auto follow = run_command(ddpx("logs " + id + " --rank 1 -f"), 60);
  EXPECT_EQ(follow.exit_code, 0) << follow.output;
  EXPECT_TRUE(contains(follow.output, "Hello from local_rank 1, global_rank 1")) << follow.output;
  EXPECT_TRUE(contains(follow.output, "tick 0\n")) << follow.output;
  EXPECT_TRUE(contains(follow.output, "tick 29\n")) << "-f returns after the last line";
  EXPECT_EQ(wait_exit_code(launcher, 10), 0);
  auto whole = run_command(ddpx("logs " + id), 30);
  EXPECT_TRUE(contains(whole.output, "tick 29\n")) << "the log stays after the job";
  auto bad_rank = run_command(ddpx("logs " + id + " --rank 5"), 30);
  EXPECT_EQ(bad_rank.exit_code, 2) << bad_rank.output;
  EXPECT_TRUE(contains(bad_rank.output, "rank5.log")) << bad_rank.output;
  auto unknown = run_command(ddpx("logs nosuch"), 30);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(contains(unknown.output, "no job 'nosuch' on this host")) << unknown.output;
}

// Only `ddpx train --save_dir` writes a snapshot: asking another program is refused, naming
// --save_dir, and the job goes on (SIGUSR1 would have ended the ticker script).
TEST_F(JobControlTest, SnapshotRefusesAJobThatCannotWriteOne) {
  pid_t launcher = start_job("a", 1, 600);
  auto list = wait_for_jobs(1);
  ASSERT_EQ(list.size(), 1u);
  std::string id = list[0]["id"];
  auto snapshot = run_command(ddpx("snapshot " + id), 30);
  EXPECT_EQ(snapshot.exit_code, 2) << snapshot.output;
  EXPECT_TRUE(contains(snapshot.output, "ddpx: error: job " + id + " runs `" +
                                            dir_.file("ticker.sh") +
                                            "`, not `ddpx train`: only `ddpx train --save_dir "
                                            "DIR` writes snapshots"))
      << snapshot.output;
  ::usleep(300 * 1000);
  EXPECT_EQ(jobs().size(), 1u) << "the job still runs";
  run_command(ddpx("stop " + id), 60);
  EXPECT_EQ(wait_exit_code(launcher, 10), 143);
}

TEST_F(JobControlTest, StopRefusesAnotherUsersJob) {
  if (::getuid() != 0 || run_command("command -v runuser", 10).exit_code != 0)
    GTEST_SKIP() << "needs root and runuser to act as a second user";
  if (run_command("runuser -u nobody -- test -x " + shell_quote(test::ddpx_binary()), 10)
          .exit_code != 0)
    GTEST_SKIP() << "user nobody cannot run " << test::ddpx_binary();
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  pid_t launcher = start_job("a", 1, 600);
  auto list = wait_for_jobs(1);
  ASSERT_EQ(list.size(), 1u);
  std::string id = list[0]["id"];
  auto as_nobody = run_command("runuser -u nobody -- env " + ddpx("stop " + id), 30);
  EXPECT_EQ(as_nobody.exit_code, 2) << as_nobody.output;
  EXPECT_TRUE(contains(as_nobody.output, "job " + id +
                                             " belongs to user root; only its owner or "
                                             "root can stop it"))
      << as_nobody.output;
  EXPECT_EQ(jobs().size(), 1u) << "the job still runs";
  run_command(ddpx("stop " + id), 60);
  wait_exit_code(launcher, 10);
}

TEST_F(JobControlTest, ShellHoldsAReservationThatRunAndTorchrunInsideUse) {
  std::string inner = write_script(dir_, "inner.sh", "echo \"worker port $MASTER_PORT\"\n");
  std::string body =
      "echo \"shell port $MASTER_PORT job $DDPX_JOB torchrun $PET_MASTER_PORT "
      "$PET_NPROC_PER_NODE\"\n" +
      ddpx("jobs --json") + " > " + shell_quote(dir_.file("inside.json")) + "\n" + "cd " +
      shell_quote(dir_.path()) + " && " + ddpx("run 2 --log_dir logs --tee all -- " + inner) +
      "\nexit 7\n";
  std::string script = write_script(dir_, "session.sh", body);
  auto result = run_command(ddpx("shell 2 -- " + script), 60);
  EXPECT_EQ(result.exit_code, 7) << "the shell's exit code: " << result.output;
  auto inside = nlohmann::json::parse(slurp(dir_.file("inside.json")));
  ASSERT_EQ(inside.size(), 1u) << inside.dump();
  EXPECT_EQ(inside[0]["kind"], "shell");
  std::string port = std::to_string(inside[0]["port"].get<int>());
  std::string id = inside[0]["id"];
  EXPECT_TRUE(
      contains(result.output, "shell port " + port + " job " + id + " torchrun " + port + " 2"))
      << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 1] worker port " + port)) << result.output;
  EXPECT_EQ(jobs().size(), 0u) << "the reservation ends with the shell";
  auto all = jobs("--all");
  ASSERT_EQ(all.size(), 1u) << "`ddpx run` inside the shell uses the shell's reservation";
  EXPECT_EQ(all[0]["exit_code"], 7);

  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torch"))
      << "no torch in DDPX_PYTHON for torchrun";
  std::string probe = dir_.file("probe.py");
  test::write_bytes(probe, "import os\nprint('torchrun worker port', os.environ['MASTER_PORT'])\n");
  std::string torchrun =
      write_script(dir_, "torchrun.sh",
                   "echo \"reserved $MASTER_PORT\"\n" + shell_quote(test::python_binary()) +
                       " -m torch.distributed.run --nproc-per-node 2 " + shell_quote(probe) + "\n");
  auto tr = run_command(ddpx("shell 1 -- " + torchrun), 120);
  ASSERT_EQ(tr.exit_code, 0) << tr.output;
  size_t at = tr.output.find("reserved ");
  ASSERT_NE(at, std::string::npos) << tr.output;
  std::string reserved = tr.output.substr(at + 9, tr.output.find('\n', at) - at - 9);
  EXPECT_TRUE(contains(tr.output, "torchrun worker port " + reserved)) << tr.output;
}

TEST_F(JobControlTest, ShellRefusesNestingAndBadCounts) {
  auto nested = run_command("DDPX_JOB=abc " + ddpx("shell 1 -- true"), 30);
  EXPECT_EQ(nested.exit_code, 2) << nested.output;
  EXPECT_TRUE(contains(nested.output, "already inside ddpx job abc")) << nested.output;
  auto zero = run_command(ddpx("shell 0 -- true"), 30);
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  auto missing = run_command(ddpx("shell 1 -- /no/such/program"), 30);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(jobs("--all").size(), 0u) << "a refused shell reserves nothing";
}

}  // namespace
}  // namespace ddpx::launch::testing
