// The Slurm scheduler's reading of `scontrol show job --oneliner`, on output recorded from
// Debian's Slurm 22.05 (tests/fixtures/slurm/: a running, a failed (exit 3), a pending job,
// then the running one cancelled). The whole path against real daemons is
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
  for (std::string line; std::getline(in, line);) jobs.insert(parse_scontrol_job(line));
  return jobs;
}

TEST(SlurmJobsTest, ScontrolGivesEachJobsPhaseReasonAndExitCode) {
  auto jobs = parse_fixture("scontrol_show_job_running_failed_pending.txt");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs["1"].phase, SlurmStatus::Phase::kRunning);
  EXPECT_EQ(jobs["1"].state, "RUNNING");
  EXPECT_EQ(jobs["2"].phase, SlurmStatus::Phase::kEnded);
  EXPECT_EQ(jobs["2"].state, "FAILED");
  EXPECT_EQ(jobs["2"].reason, "NonZeroExitCode");
  EXPECT_EQ(jobs["2"].exit_code, 3) << "ExitCode=3:0 is the script's own exit status";
  EXPECT_EQ(jobs["3"].phase, SlurmStatus::Phase::kPending);
  EXPECT_EQ(jobs["3"].reason, "Resources");
}

TEST(SlurmJobsTest, ACancelledJobEndsAsSigtermDid) {
  auto jobs = parse_fixture("scontrol_show_job_cancelled_failed_running.txt");
  EXPECT_EQ(jobs["1"].state, "CANCELLED");
  EXPECT_EQ(jobs["1"].phase, SlurmStatus::Phase::kEnded);
  EXPECT_EQ(jobs["1"].exit_code, 143) << "ExitCode=0:15: signal 15";
  EXPECT_EQ(jobs["3"].phase, SlurmStatus::Phase::kRunning);
}

TEST(SlurmJobsTest, EndsWithoutACodeOfTheirOwnGetOne) {
  auto cancelled_pending = parse_scontrol_job(
      "JobId=7 JobName=x JobState=CANCELLED Reason=None "
      "ExitCode=0:0 RunTime=00:00:00");
  EXPECT_EQ(cancelled_pending.second.exit_code, 143);
  auto timeout = parse_scontrol_job("JobId=8 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0");
  EXPECT_EQ(timeout.second.exit_code, 124);
  auto node_fail = parse_scontrol_job("JobId=9 JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0");
  EXPECT_EQ(node_fail.second.exit_code, 1);
  auto completed = parse_scontrol_job("JobId=10 JobState=COMPLETED Reason=None ExitCode=0:0");
  EXPECT_EQ(completed.second.exit_code, 0);
  // A key that only ends another key's name is not it.
  auto tricky = parse_scontrol_job("JobId=11 OldJobState=RUNNING JobState=PENDING Reason=Priority");
  EXPECT_EQ(tricky.second.state, "PENDING");
}

TEST(SlurmJobsTest, ALineWithoutAJobIsAnError) {
  EXPECT_THROW(parse_scontrol_job("No jobs in the system"), Error);
  EXPECT_THROW(parse_scontrol_job("JobId=3 JobName=x"), Error);
}

}  // namespace
}  // namespace ddpx::serve
