// No silent hang: real 2-rank jobs under `ddpx run` (this binary as a scripted rank, see
// collective_script.h) in which one rank stops, calls a different collective, or never joins,
// also with collectives whose wait() returns before they run (NCCL's way, queued_backend.h).
// Each must end within the timeout plus a few seconds, print one table of the ranks' last
// collectives, and name the rank behind or the mismatch.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "collective_script.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

constexpr double kTimeoutS = 3;
// Start-up (loading libtorch into three processes on a busy 2-core machine), the timeout, and
// the launcher's stop; a hang would run into run_command's limit instead.
constexpr double kEndWithinS = kTimeoutS + 20;

struct Job {
  test::CommandResult result;
  double seconds = 0;
};

Job run_job(const test::TempDir& dir, const std::string& script, const std::string& rank1,
            const std::string& extra_env = "") {
  std::string command = extra_env + " " + test::collective_script_env(script, rank1, kTimeoutS) +
                        " " + test::ddpx_binary() + " run 2 --grace_s 1 --log_dir " + dir.path() +
                        " -- " + test::self_binary();
  auto start = std::chrono::steady_clock::now();
  Job job;
  job.result = run_command(command, 120);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expect_ended_with_one_table(const Job& job) {
  const auto& r = job.result;
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(job.seconds, kEndWithinS) << r.output;
  EXPECT_EQ(count(r.output, "# rank  pid"), 1u) << "one table, from the launcher\n" << r.output;
  std::printf("[ measured ] job ended %.1f s after start (timeout %.0f s)\n", job.seconds,
              kTimeoutS);
}

TEST(CollectiveTimeoutTest, AStoppedRankIsNamedBehindWithItsLastCollective) {
  test::TempDir dir;
  // Rank 1 completes two all-reduces and stops itself (SIGSTOP); rank 0 goes on to broadcast.
  auto job = run_job(dir, "allreduce:1024 allreduce:1024 broadcast:10",
                     "allreduce:1024 allreduce:1024 stop");
  expect_ended_with_one_table(job);
  const std::string verdict =
      "rank 1 is behind (process stopped): last completed seq 2 (allreduce float[1024]), "
      "others wait in seq 3 (broadcast float[10])";
  EXPECT_NE(job.result.output.find("ddpx run: " + verdict), std::string::npos) << job.result.output;
  // Rank 0's own one-line error names the operation and the same verdict.
  EXPECT_TRUE(std::regex_search(
      job.result.output,
      std::regex(R"(error \[rank 0\]: broadcast \(seq 3\) failed: .*rank 1 is behind)")))
      << job.result.output;
}

TEST(CollectiveTimeoutTest, ADifferentCollectiveOnOneRankIsNamedAMismatch) {
  test::TempDir dir;
  auto job = run_job(dir, "allreduce:1024 allreduce:1024", "allreduce:1024 broadcast:10");
  expect_ended_with_one_table(job);
  EXPECT_NE(job.result.output.find("mismatched collectives at seq 2: rank 0 allreduce "
                                   "float[1024], rank 1 broadcast float[10]"),
            std::string::npos)
      << job.result.output;
}

TEST(CollectiveTimeoutTest, ADifferentShapeOverGlooIsNamedAMismatch) {
  test::TempDir dir;
  // Same op, other size: Gloo's ring then waits for bytes that never come.
  auto job = run_job(dir, "allreduce:1024 allreduce:1024", "allreduce:1024 allreduce:100000",
                     "DDPX_TEST_TRANSPORT=gloo");
  expect_ended_with_one_table(job);
  EXPECT_NE(job.result.output.find("mismatched collectives at seq 2: rank 0 allreduce "
                                   "float[1024], rank 1 allreduce float[100000]"),
            std::string::npos)
      << job.result.output;
}

// NCCL's wait() returns at once and the host then blocks inside CUDA: no error reaches it. Here
// rank 0's third all-reduce is queued, rank 1 never calls it, and rank 0's host "blocks" (sleeps
// 600 s). ddpx's own watch must end the job at the timeout with the verdict, the record showing
// the queued collective as waiting (not done), and Gloo's own timeout (30 s later) not reached.
TEST(CollectiveTimeoutTest, AQueuedCollectiveStillPendingAtTheTimeoutEndsTheJobWithTheVerdict) {
  test::TempDir dir;
  auto job = run_job(dir, "allreduce:1024 allreduce:1024 allreduce:1024 sleep:600",
                     "allreduce:1024 allreduce:1024 sleep:600", "DDPX_TEST_QUEUED=1");
  expect_ended_with_one_table(job);
  const auto& out = job.result.output;
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex(R"(error \[rank 0\]: allreduce float\[1024\] \(seq 3\) did not complete )"
                 R"(within the collective timeout of 3 s \(--timeout\): still running \d+\.\d s)")))
      << out;
  const std::string verdict =
      "rank 1 is behind: last completed seq 2 (allreduce float[1024]), others wait in seq 3 "
      "(allreduce float[1024])";
  EXPECT_NE(out.find("ddpx run: " + verdict), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(\n  0 +\d+ +\w+ +3 +allreduce float\[1024\] .*WAITING)")))
      << "the queued collective is waiting in the record, not done\n"
      << out;
}

// An NCCL error (a peer gone, a network fault) completes the queued Work with an exception that
// nobody waits for. Rank 1 runs its two all-reduces and exits; rank 0's third fails in Gloo.
TEST(CollectiveTimeoutTest, AQueuedCollectiveThatFailsEndsTheJobWithTheVerdict) {
  test::TempDir dir;
  auto job = run_job(dir, "allreduce:1024 allreduce:1024 allreduce:1024 sleep:600",
                     "allreduce:1024 allreduce:1024 sync", "DDPX_TEST_QUEUED=1");
  expect_ended_with_one_table(job);
  const auto& out = job.result.output;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(error \[rank 0\]: allreduce float\[1024\] \(seq 3\) failed after )"
                      R"(wait\(\) returned: .*; rank 1 is behind.*: last completed seq 2)")))
      << out;
  EXPECT_LT(job.seconds, kEndWithinS - kTimeoutS) << "a failure needs no timeout\n" << out;
}

TEST(CollectiveTimeoutTest, ARankThatNeverJoinsEndsTheRendezvousNamingIt) {
  test::TempDir dir;
  auto job = run_job(dir, "allreduce:1024", "nojoin");
  const auto& r = job.result;
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(job.seconds, kEndWithinS) << r.output;
  EXPECT_NE(r.output.find("rank 0: rank(s) 1 of WORLD_SIZE=2 did not join the rendezvous"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("raise --timeout"), std::string::npos) << "says what to do\n" << r.output;
}

}  // namespace
}  // namespace ddpx
