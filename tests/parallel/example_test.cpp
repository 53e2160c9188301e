// The examples (examples/my_model_ddp.cpp, examples/my_model_fsdp.cpp) as a user would run
// them: two processes with torchrun's variables on 127.0.0.1. Both must finish, the loss must
// fall, and both ranks must end with identical weights.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "support/support.h"

namespace ddpx::test {
namespace {

// Runs `binary` as ranks 0 and 1 and checks what every example promises; returns the output.
std::string run_example_on_two_processes(const std::string& binary) {
  TempDir dir;
  const int port = free_port();
  const std::string bin = shell_quote(binary);
  std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                    " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2";
  const std::string log1 = shell_quote(dir.file("rank1.log"));
  auto result = run_command(
      "RANK=1 LOCAL_RANK=1 " + env + " " + bin + " > " + log1 + " 2>&1 & RANK=0 LOCAL_RANK=0 " +
          env + " " + bin + "; s=$?; wait $!; t=$?; cat " + log1 + "; [ $s -eq 0 ] && [ $t -eq 0 ]",
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
  EXPECT_EQ(ranks.size(), 2u) << result.output;
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
  run_example_on_two_processes(DDPX_EXAMPLE_MY_MODEL_DDP);
#endif
}

TEST(ExampleTest, MyModelFsdpTrainsFullyShardedOnTwoProcessesWithEqualWeights) {
#ifndef DDPX_EXAMPLE_MY_MODEL_FSDP
  GTEST_SKIP() << "examples are not built (DDPX_BUILD_EXAMPLES=OFF)";
#else
  const std::string output = run_example_on_two_processes(DDPX_EXAMPLE_MY_MODEL_FSDP);
  EXPECT_NE(output.find("(--shard full, ZeRO-3: parameters, gradients and optimizer state split "
                        "in 3 units)"),
            std::string::npos)
      << output;
#endif
}

}  // namespace
}  // namespace ddpx::test
