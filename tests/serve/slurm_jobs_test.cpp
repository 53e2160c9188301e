// The Slurm scheduler's reading of squeue, on output recorded from Debian's Slurm 22.05
// (tests/fixtures/slurm/: a running, a failed (exit 3), a pending job, then the running one
// cancelled). The whole path against real daemons is
// tests/cluster/serve_slurm_test.sh.
#include "serve/slurm_jobs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "support/support.h"

namespace ddpx::serve {
namespace {

std::map<std::string, SlurmStatus> parse_fixture(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/fixtures/slurm/" + name);
  EXPECT_TRUE(in) << name;
  std::map<std::string, SlurmStatus> jobs;
  for (std::string line; std::getline(in, line);) jobs.insert(parse_squeue_job(line));
  return jobs;
}

TEST(SlurmJobsTest, SqueueGivesEachJobsPhaseReasonAndExitCode) {
  auto jobs = parse_fixture("squeue_running_failed_pending.txt");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs["1"].phase, SlurmStatus::Phase::kRunning);
  EXPECT_EQ(jobs["1"].state, "RUNNING");
  EXPECT_EQ(jobs["2"].phase, SlurmStatus::Phase::kEnded);
  EXPECT_EQ(jobs["2"].state, "FAILED");
  EXPECT_EQ(jobs["2"].reason, "NonZeroExitCode");
  EXPECT_EQ(jobs["2"].exit_code, 3) << "wait status 768: the script's own exit code 3";
  EXPECT_EQ(jobs["3"].phase, SlurmStatus::Phase::kPending);
  EXPECT_EQ(jobs["3"].reason, "Resources");
}

TEST(SlurmJobsTest, ACancelledJobEndsAsSigtermDid) {
  auto jobs = parse_fixture("squeue_cancelled_failed_running.txt");
  EXPECT_EQ(jobs["1"].state, "CANCELLED");
  EXPECT_EQ(jobs["1"].phase, SlurmStatus::Phase::kEnded);
  EXPECT_EQ(jobs["1"].exit_code, 143) << "wait status 15: SIGTERM";
  EXPECT_EQ(jobs["3"].phase, SlurmStatus::Phase::kRunning);
}

TEST(SlurmJobsTest, EndsWithoutACodeOfTheirOwnGetOne) {
  EXPECT_EQ(parse_squeue_job("7|CANCELLED|None|0|").second.exit_code, 143) << "cancelled pending";
  EXPECT_EQ(parse_squeue_job("8|TIMEOUT|TimeLimit|0|").second.exit_code, 124);
  EXPECT_EQ(parse_squeue_job("9|NODE_FAIL|NodeDown|0|").second.exit_code, 1);
  EXPECT_EQ(parse_squeue_job("10|COMPLETED|None|0|").second.exit_code, 0);
  EXPECT_EQ(parse_squeue_job("11|FAILED|NonZeroExitCode|9|").second.exit_code, 137) << "SIGKILL";
}

TEST(SlurmJobsTest, ALineOfAnotherShapeIsAnError) {
  EXPECT_THROW(parse_squeue_job("slurm_load_jobs error: Invalid job id specified"), Error);
  EXPECT_THROW(parse_squeue_job("3|RUNNING|None|"), Error);
  EXPECT_THROW(parse_squeue_job("3|RUNNING|None|N/A|"), Error);
}

}  // namespace
}  // namespace ddpx::serve
