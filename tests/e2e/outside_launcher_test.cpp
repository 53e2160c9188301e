// Ranks that `ddpx run` did not start, as torchrun, srun or a user's own script start them:
// how many threads each takes, a pipeline's stages under torchrun, and what a rank whose master
// never answers prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "distributed/threads.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

const std::string kOutsideTrain =
    " train --model mlp --dataset synthetic --synthetic_size 64 --synthetic_image 8 "
    "--batch_size 16 --num_epochs 1 --limit_test_batches 0 --timeout 60";

// The header's "threads N" (rank 0's), or -1.
int header_threads(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(R"(\| threads ([0-9]+))"))) return -1;
  return std::stoi(m[1]);
}

// torchrun sets OMP_NUM_THREADS=1 for each of several workers; ddpx used to take every core
// in each of them anyway.
TEST(OutsideLauncherTest, TorchrunWorkersTakeTheOneThreadTorchrunSets) {
  const std::string torchrun =
      (std::filesystem::path(test::python_binary()).parent_path() / "torchrun").string();
  DDPX_SKIP_WITHOUT_TOOL(std::filesystem::exists(torchrun)) << "no torchrun beside " << torchrun;
  if (dist::usable_cores() < 2) GTEST_SKIP() << "one core: every choice gives one thread";
  auto r =
      run_command("unset OMP_NUM_THREADS DDPX_THREADS; " + torchrun +
                      " --nproc_per_node 2 --no-python --master_port " +
                      std::to_string(test::free_port()) + " " + test::ddpx_binary() + kOutsideTrain,
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(header_threads(r.output), 1) << r.output;
}

// torchrun's two workers as two pipeline stages: the stage table, the bubble and the accuracy
// come from rank 0 (mpirun's and srun's are in tests/cluster/).
TEST(OutsideLauncherTest, TorchrunWorkersRunAPipelineOfTwoStages) {
  const std::string torchrun =
      (std::filesystem::path(test::python_binary()).parent_path() / "torchrun").string();
  DDPX_SKIP_WITHOUT_TOOL(std::filesystem::exists(torchrun)) << "no torchrun beside " << torchrun;
  auto r = run_command(torchrun + " --nproc_per_node 2 --no-python --master_port " +
                           std::to_string(test::free_port()) + " " + test::ddpx_binary() +
                           " train --model mlp --dataset synthetic --synthetic_size 64 "
                           "--synthetic_image 8 --batch_size 16 --num_epochs 1 --timeout 60 "
                           "--pipeline_parallel 2 --microbatches 4",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"joined 2 ranks via 127.0.0.1:", "(gloo+shm, torchrun)",
                           "pipeline: 2 stages on 2 ranks a replica, 1 replica",
                           "pipeline bubble (idle share of each rank's forward and backward) by "
                           "rank: 0 ",
                           "Accuracy on test dataset - "}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
}

// Ranks started by hand with nothing saying how many threads: the cores are shared among the
// ranks of the host (LOCAL_WORLD_SIZE), not taken whole by each.
TEST(OutsideLauncherTest, RanksStartedByHandShareTheCores) {
  const int cores = dist::usable_cores();
  if (cores < 2) GTEST_SKIP() << "one core: every choice gives one thread";
  const std::string env =
      "unset OMP_NUM_THREADS DDPX_THREADS SLURM_CPUS_PER_TASK; "
      "export MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
      std::to_string(test::free_port()) + " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2; ";
  const std::string rank1 = "RANK=1 LOCAL_RANK=1 " + test::ddpx_binary() + kOutsideTrain;
  const std::string rank0 = "RANK=0 LOCAL_RANK=0 " + test::ddpx_binary() + kOutsideTrain;
  auto r = run_command(env + "(" + rank1 + " > /dev/null 2>&1 &); " + rank0, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(header_threads(r.output), cores / 2) << r.output;
  // What the user sets wins, whoever started the process.
  auto set = run_command(
      "export OMP_NUM_THREADS=1; unset DDPX_THREADS; " + test::ddpx_binary() + kOutsideTrain, 300);
  ASSERT_EQ(set.exit_code, 0) << set.output;
  EXPECT_EQ(header_threads(set.output), 1) << set.output;
}

// A worker whose master does not answer (nobody listens on the port): ddpx's lines only, no
// libtorch retry warnings with C++ backtraces, and its error at --timeout naming the address.
TEST(OutsideLauncherTest, AnUnreachableMasterEndsInOneLineWithoutBacktraces) {
  const int port = test::free_port();
  auto r = run_command("MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                           " RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 " +
                           test::ddpx_binary() +
                           " train --model mlp --dataset synthetic --synthetic_size 64 "
                           "--synthetic_image 8 --timeout 3",
                       120);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\[[WE][0-9]{4} )")))
      << "no libtorch log lines\n"
      << r.output;
  // At most one "still trying" line per 30 s interval: one in a 3 s timeout.
  size_t waiting = 0;
  for (size_t at = r.output.find("does not answer"); at != std::string::npos;
       at = r.output.find("does not answer", at + 1))
    ++waiting;
  EXPECT_LE(waiting, 1u) << r.output;
  // The last line is ddpx's error, naming the address and what to check.
  std::string last = r.output.substr(0, r.output.find_last_not_of('\n') + 1);
  last = last.substr(last.rfind('\n') + 1);
  const std::string where = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(last.rfind("ddpx: error", 0), 0u) << r.output;
  EXPECT_NE(last.find("could not reach the rendezvous at " + where), std::string::npos) << r.output;
  EXPECT_NE(last.find("check that rank 0 is running"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
