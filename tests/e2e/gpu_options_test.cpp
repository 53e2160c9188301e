// The GPU-facing options as a user meets them on a machine without a GPU: --amp bf16 trains
// (CPU autocast) to the accuracy of fp32, the refusals are one line with exit code 2, and the
// GEMM benchmark states its dtype, shape and peak. The GPU peak table is checked here too.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <regex>

#include "bench/peaks.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx_command;
using test::printed_test_accuracy;

TEST(GpuOptionsTest, Bf16AutocastOnCpuTrainsAsWellAsFp32) {
  const std::string common =
      "train --num_epochs 1 --batch_size 64 --limit_train_batches 150 --limit_test_batches 8 "
      "--threads 2 --no_progress";
  auto fp32 = run_command(ddpx_command(common), 600);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  auto bf16 = run_command(ddpx_command(common + " --amp bf16"), 600);
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("amp bf16"), std::string::npos) << bf16.output;
  double a = printed_test_accuracy(fp32.output), b = printed_test_accuracy(bf16.output);
  EXPECT_GT(b, 0.70) << bf16.output;
  EXPECT_NEAR(b, a, 0.05) << "fp32 " << a << ", bf16 " << b;
}

TEST(GpuOptionsTest, TwoWorkersWithChannelsLastTrainAndNameEachRanksDevice) {
  auto r =
      run_command(ddpx_command("run 2 -- train --num_epochs 1 --batch_size 64 "
                               "--limit_train_batches 60 --limit_test_batches 4 --channels_last "
                               "--amp bf16 --no_progress"),
                  600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("channels_last on | optimizer step: the optimizer's own step"),
            std::string::npos)
      << "the one-pass CPU step needs contiguous weights\n"
      << r.output;
  EXPECT_NE(r.output.find("  rank 0: cpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  rank 1: cpu"), std::string::npos) << r.output;
  EXPECT_GT(printed_test_accuracy(r.output), 0.5) << r.output;
}

TEST(GpuOptionsTest, RequestsThisMachineCannotMeetAreOneLineErrors) {
  struct Case {
    std::string args, expect;
    bool needs_no_gpu;
  };
  const std::vector<Case> cases = {
      {"train --device cuda", "--device cuda", true},
      {"train --device cpu --amp fp16", "--amp fp16 needs a GPU", false},
      {"train --device cpu --backend nccl", "--backend nccl reduces GPU tensors", false},
      {"bench gemm --device cuda --size 64", "--device cuda", true},
      {"bench gemm --device cpu --dtype tf32 --size 64", "--dtype tf32", false},
      {"bench gemm --device cpu --dtype int8", "--dtype 'int8'", false},
  };
  for (const auto& c : cases) {
    if (c.needs_no_gpu && torch::cuda::is_available()) continue;
    auto r = run_command(ddpx_command(c.args), 120);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    auto error_line = r.output.find("error:");
    ASSERT_NE(error_line, std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n', error_line), r.output.rfind('\n')) << "one line:\n" << r.output;
  }
}

TEST(GpuOptionsTest, GemmStatesDtypeShapeAndPeak) {
  auto r = run_command(
      ddpx_command("bench gemm --device cpu --dtype bf16 --m 64 --n 32 --k 16 --iterations 2"),
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("m 64 n 32 k 16, bf16 on cpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Average performance: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16 64x32x16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Peak: "), std::string::npos) << r.output;
}

TEST(GpuPeakTest, KnownGpusByTheDriversNameAndDtype) {
  auto h100 = bench::gpu_peak("NVIDIA H100 80GB HBM3", "bf16");
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->label, "H100 SXM");
  EXPECT_DOUBLE_EQ(h100->tflops, 989.4);
  EXPECT_EQ(bench::gpu_peak("NVIDIA H100 PCIe", "bf16")->label, "H100 PCIe");
  EXPECT_EQ(bench::gpu_peak("NVIDIA H200", "tf32")->tflops, 494.7);
  EXPECT_EQ(bench::gpu_peak("NVIDIA H200 NVL", "bf16")->label, "H200 NVL");
  EXPECT_EQ(bench::gpu_peak("NVIDIA A100-SXM4-80GB", "fp16")->tflops, 312.0);
  EXPECT_EQ(bench::gpu_peak("AMD Instinct MI300X", "bf16")->tflops, 1307.4);
  EXPECT_EQ(bench::gpu_peak("NVIDIA RTX A6000", "fp32")->tflops, 38.7);
  EXPECT_FALSE(bench::gpu_peak("AMD Instinct MI250X", "tf32").has_value()) << "no TF32 there";
  EXPECT_FALSE(bench::gpu_peak("NVIDIA GeForce RTX 4090", "bf16").has_value());
  EXPECT_FALSE(bench::gpu_peak("NVIDIA H100 80GB HBM3", "int8").has_value());
}

}  // namespace
}  // namespace ddpx
