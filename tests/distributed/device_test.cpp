// Device selection (distributed/device.h): which GPU a local rank takes, the refusals where there
// is none, the busy-GPU verdict, and the backend that follows the device.
#include "distributed/device.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "core/error.h"
#include "distributed/context.h"
#include "distributed/ranks.h"
#include "support/support.h"

namespace ddpx::dist {
namespace {

TEST(DeviceTest, OneVisibleGpuServesEveryLocalRank) {
  // `ddpx run` gives each worker its own GPU through CUDA_VISIBLE_DEVICES: the worker sees one.
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    EXPECT_EQ(device_index_for(local_rank, 8, 1), 0);
  }
}

TEST(DeviceTest, SeveralVisibleGpusGoByLocalRank) {
  // torchrun, Slurm and MPI workers see the node's GPUs and take the one of their LOCAL_RANK.
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    EXPECT_EQ(device_index_for(local_rank, 4, 4), local_rank);
  }
  EXPECT_EQ(device_index_for(1, 2, 8), 1);
}

TEST(DeviceTest, MoreLocalRanksThanGpusIsRefusedNamingBoth) {
  std::string message = test::usage_error([] { device_index_for(3, 4, 2); });
  EXPECT_NE(message.find("LOCAL_RANK 3"), std::string::npos) << message;
  EXPECT_NE(message.find("sees 2 GPUs"), std::string::npos) << message;
}

TEST(DeviceTest, CpuIsChosenWhenAskedAndWhenNoGpuIsVisible) {
  WorldInfo world;
  EXPECT_TRUE(select_device(DeviceChoice::kCpu, world).is_cpu());
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU: auto picks it";
  EXPECT_TRUE(select_device(DeviceChoice::kAuto, world).is_cpu());
}

// `ddpx run` gave this worker a GPU (CUDA_VISIBLE_DEVICES) that libtorch cannot see: --device
// auto still trains on the CPU, but says why and where to look; a GPU hidden on purpose
// (empty, -1) or one that is seen says nothing.
TEST(DeviceTest, AnAssignedGpuThatLibtorchCannotSeeIsNamed) {
  ::setenv("CUDA_VISIBLE_DEVICES", "2", 1);
  auto warning = assigned_gpu_unseen(0);
  auto seen = assigned_gpu_unseen(1);
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  auto hidden = assigned_gpu_unseen(0);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  auto empty = assigned_gpu_unseen(0);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("CUDA_VISIBLE_DEVICES='2'"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("training on the CPU"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("ddpx doctor"), std::string::npos) << *warning;
  EXPECT_FALSE(seen.has_value());
  EXPECT_FALSE(hidden.has_value());
  EXPECT_FALSE(empty.has_value());
}

TEST(DeviceTest, CudaWithoutAGpuIsOneClearLine) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  WorldInfo world;
  world.rank = 3;
  std::string message = test::usage_error([&] { select_device(DeviceChoice::kCuda, world); });
  EXPECT_NE(message.find("--device cuda"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 3"), std::string::npos) << message;
  EXPECT_NE(message.find("--device cpu"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(DeviceTest, BusyGpuWarnsThenRefuses) {
  constexpr uint64_t kGiB = 1ull << 30;
  EXPECT_FALSE(judge_busy_gpu("GPU 0", {79 * kGiB, 80 * kGiB}).has_value());
  auto warn = judge_busy_gpu("GPU 0", {64 * kGiB, 80 * kGiB});
  ASSERT_TRUE(warn.has_value());
  EXPECT_FALSE(warn->fatal);
  EXPECT_NE(warn->message.find("16.0 of 80.0 GiB"), std::string::npos) << warn->message;
  auto fatal = judge_busy_gpu("rank 1: GPU cuda:0 (NVIDIA H100)", {10 * kGiB, 80 * kGiB});
  ASSERT_TRUE(fatal.has_value());
  EXPECT_TRUE(fatal->fatal);
  EXPECT_NE(fatal->message.find("rank 1"), std::string::npos) << fatal->message;
  EXPECT_NE(fatal->message.find("another job"), std::string::npos) << fatal->message;
}

TEST(DeviceTest, NcclForCpuTensorsIsRefused) {
  InitOptions options;
  options.device = DeviceChoice::kCpu;
  options.backend = BackendChoice::kNccl;
  std::string message = test::usage_error([&] { init(WorldInfo{}, options); });
  EXPECT_NE(message.find("--backend nccl"), std::string::npos) << message;
  EXPECT_NE(message.find("--backend gloo"), std::string::npos) << message;
}

TEST(DeviceTest, ContextSaysItsDeviceAndGathersEveryRanksText) {
  auto errors = test::run_ranks(2, [](int rank, Context& context) {
    EXPECT_TRUE(context.device().is_cpu());
    auto texts =
        context.gather_text("rank " + std::to_string(rank) + " on " + context.device().str());
    ASSERT_EQ(texts.size(), 2u);
    EXPECT_EQ(texts[0], "rank 0 on cpu");
    EXPECT_EQ(texts[1], "rank 1 on cpu");
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(test::error_text(errors[r]), "") << r;
}

}  // namespace
}  // namespace ddpx::dist
