// The examples (examples/my_model_ddp.cpp, my_model_fsdp.cpp, my_model_pipeline.cpp) as a user
// would run them: processes with torchrun's variables on 127.0.0.1 (two; the pipeline four, 2
// stages x 2 replicas that shard them). Every one must finish, the loss must fall, and every rank
// must end with identical weights.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "support/support.h"

namespace ddpx::test {
namespace {

// Runs `binary` as ranks 0 .. world - 1 and checks what every example promises; returns the
// output (rank 0's, then the others').
std::string run_example(const std::string& binary, int world = 2) {
  TempDir dir;
  const int port = free_port();
  const std::string bin = shell_quote(binary);
  // OMP_NUM_THREADS=1 as torchrun sets it for several processes a node (`ddpx run`: the cores
  // split over them): without it each rank's intra-op threads want every core, and four ranks on
  // the 2-core machine spun against each other (the pipeline example: 39 CPU-s, 2.5 with it).
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " WORLD_SIZE=" + std::to_string(world) +
                          " LOCAL_WORLD_SIZE=" + std::to_string(world) + " OMP_NUM_THREADS=1";
  std::string others, waits, logs;
  for (int r = 1; r < world; ++r) {
    const std::string log = shell_quote(dir.file("rank" + std::to_string(r) + ".log"));
    others += "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) + " " + env + " " +
              bin + " > " + log + " 2>&1 & pids=\"$pids $!\"; ";
    logs += " " + log;
  }
  auto result = run_command("pids=; " + others + "RANK=0 LOCAL_RANK=0 " + env + " " + bin +
                                "; s=$?; for p in $pids; do wait $p || s=1; done; cat" + logs +
                                "; [ $s -eq 0 ]",
                            /*timeout_s=*/120);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("epoch 5 loss"), std::string::npos) << result.output;

  std::regex checksum_line(R"(rank (\d) weights checksum (\S+))");
  std::set<std::string> checksums, ranks;
  for (std::sregex_iterator it(result.output.begin(), result.output.end(), checksum_line), end;
       it != end; ++it) {
    ranks.insert((*it)[1]);
    checksums.insert((*it)[2]);
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(world)) << result.output;
  EXPECT_EQ(checksums.size(), 1u) << "ranks diverged:\n" << result.output;

  // Training works: the last epoch's loss is well below the first's.
  std::regex loss_line(R"(epoch (\d) loss (\S+))");
  std::vector<double> losses;
  for (std::sregex_iterator it(result.output.begin(), result.output.end(), loss_line), end;
       it != end; ++it) {
    losses.push_back(std::stod((*it)[2]));
  }
  EXPECT_EQ(losses.size(), 5u) << result.output;
  if (losses.size() == 5) EXPECT_LT(losses.back(), 0.5 * losses.front()) << result.output;
  return result.output;
}

TEST(ExampleTest, MyModelDdpTrainsOnTwoProcessesWithEqualWeights) {
#ifndef DDPX_EXAMPLE_MY_MODEL_DDP
  GTEST_SKIP() << "examples are not built (DDPX_BUILD_EXAMPLES=OFF)";
#else
  run_example(DDPX_EXAMPLE_MY_MODEL_DDP);
#endif
}

TEST(ExampleTest, MyModelFsdpTrainsFullyShardedOnTwoProcessesWithEqualWeights) {
#ifndef DDPX_EXAMPLE_MY_MODEL_FSDP
  GTEST_SKIP() << "examples are not built (DDPX_BUILD_EXAMPLES=OFF)";
#else
  const std::string output = run_example(DDPX_EXAMPLE_MY_MODEL_FSDP);
  EXPECT_NE(output.find("(--shard full, ZeRO-3: parameters, gradients and optimizer state split "
                        "in 3 units)"),
            std::string::npos)
      << output;
#endif
}

TEST(ExampleTest, MyModelPipelineTrainsAsTwoStagesShardedOverTwoReplicasWithEqualWeights) {
#ifndef DDPX_EXAMPLE_MY_MODEL_PIPELINE
  GTEST_SKIP() << "examples are not built (DDPX_BUILD_EXAMPLES=OFF)";
#else
  const std::string output = run_example(DDPX_EXAMPLE_MY_MODEL_PIPELINE, 4);
  EXPECT_NE(output.find("2 stages x 2 data-parallel replicas (1f1b, 4 micro-batches"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("each stage sharded over its 2 replicas (--shard full, ZeRO-3)"),
            std::string::npos)
      << output;
#endif
}

}  // namespace
}  // namespace ddpx::test
