// The GPU-facing options as a user meets them on a machine without a GPU: --amp bf16 trains
// (CPU autocast) to the accuracy of fp32, the refusals are one line with exit code 2, and the
// GEMM benchmark states its dtype, shape and peak. The GPU peak table is checked here too.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "distributed/peak_flops.h"
#include "doctor/gpu_tools.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx_command;
using test::printed_test_accuracy;

// The MLP: on a CPU without native bf16 (AVX2 only) ATen emulates bf16 convolutions 40x slower
// than fp32, and a ResNet would take minutes; autocast's casts are the same for any model.
TEST(GpuOptionsTest, Bf16AutocastOnCpuTrainsAsWellAsFp32) {
  const std::string common =
      "train --model mlp --num_epochs 1 --batch_size 64 --limit_train_batches 150 "
      "--limit_test_batches 8 --threads 2 --no_progress";
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
      run_command(ddpx_command("run 2 -- train --model resnet20 --optimizer adamw "
                               "--learning_rate 0.002 --num_epochs 1 --batch_size 16 "
                               "--limit_train_batches 40 --limit_test_batches 2 --channels_last "
                               "--no_progress"),
                  600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // ATen's fused AdamW walks a weight and its gradient as flat memory: channels_last weights,
  // whose gradients and state share their strides, take it too.
  EXPECT_NE(r.output.find("channels_last on | optimizer step: fused AdamW"), std::string::npos)
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
      {"bench gemm --device cpu --dtype int8", "--dtype: int8 not in", false},
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
  EXPECT_NE(r.output.find("Successful iterations: 2/2 "), std::string::npos) << r.output;
  // The CPU estimate covers fp32 and fp64 only: bf16 says so rather than guessing.
  EXPECT_NE(r.output.find("\nPeak: unknown for cpu in bf16\n"), std::string::npos) << r.output;
}

std::string fixture(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/fixtures/doctor/" + name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

// `amd-smi static --asic`: each GPU's MARKET_NAME.
std::vector<std::string> amd_smi_market_names(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("MARKET_NAME: ");
    if (at != std::string::npos) names.push_back(line.substr(at + 13));
  }
  return names;
}

// The peak table keyed by the names the tools really print, read from their recorded outputs
// (tests/fixtures/doctor/SOURCES.md), not from a copy of the table's own spellings.
TEST(GpuPeakTest, GpusAsTheToolsNameThemFindTheirPeaks) {
  struct Case {
    std::string tool_output;
    std::vector<std::string> names;
    std::string dtype, label;
    double tflops;
  };
  const auto nvidia_names = [](const std::string& file) {
    std::vector<std::string> names;
    for (const auto& gpu : doctor::parse_nvidia_smi(fixture(file)).gpus) names.push_back(gpu.name);
    return names;
  };
  const auto rocm_names = [](const std::string& file) {
    std::vector<std::string> names;
    for (const auto& gpu : doctor::parse_rocm_smi(fixture(file))) names.push_back(gpu.name);
    return names;
  };
  const std::vector<Case> cases = {
      {"nvidia-smi.txt", nvidia_names("nvidia-smi.txt"), "bf16", "H100 SXM", 989.4},
      {"nvidia-smi-rtxa6000-24q.txt", nvidia_names("nvidia-smi-rtxa6000-24q.txt"), "fp32",
       "RTX A6000", 38.7},
      {"rocm-smi-mi300x.txt", rocm_names("rocm-smi-mi300x.txt"), "bf16", "MI300X", 1307.4},
      {"amd-smi-static-asic-mi300x.txt",
       amd_smi_market_names(fixture("amd-smi-static-asic-mi300x.txt")), "fp32", "MI300X", 163.4},
  };
  const std::set<std::string> expected_names = {"NVIDIA H100 80GB HBM3", "NVIDIA RTXA6000-24Q",
                                                "AMD Instinct MI300X"};
  std::set<std::string> seen;
  for (const Case& c : cases) {
    ASSERT_FALSE(c.names.empty()) << c.tool_output << " names no GPU";
    for (const std::string& name : c.names) {
      seen.insert(name);
      auto peak = dist::gpu_peak(name, c.dtype);
      ASSERT_TRUE(peak.has_value()) << "'" << name << "' from " << c.tool_output;
      EXPECT_EQ(peak->label, c.label) << name;
      EXPECT_DOUBLE_EQ(peak->tflops, c.tflops) << name;
    }
  }
  EXPECT_EQ(seen, expected_names) << "the fixtures hold the names the issue quotes";
}

// The row a name matches, or "(none)".
std::string peak_label(const std::string& name, const std::string& dtype) {
  auto peak = dist::gpu_peak(name, dtype);
  return peak ? peak->label : "(none)";
}

TEST(GpuPeakTest, SpellingsOfOneGpuAndTheDtypesItLacks) {
  EXPECT_EQ(peak_label("NVIDIA RTX A6000", "fp32"), "RTX A6000");
  EXPECT_EQ(peak_label("AMD Instinct MI300X VF", "bf16"), "MI300X");
  EXPECT_EQ(peak_label("NVIDIA H100 PCIe", "bf16"), "H100 PCIe");
  EXPECT_EQ(peak_label("NVIDIA H100 NVL", "bf16"), "H100 NVL");
  EXPECT_EQ(peak_label("NVIDIA H200 NVL", "bf16"), "H200 NVL");
  EXPECT_EQ(peak_label("NVIDIA GH200 480GB", "bf16"), "GH200");
  EXPECT_EQ(peak_label("NVIDIA A100-SXM4-80GB", "fp16"), "A100");
  EXPECT_EQ(peak_label("AMD Instinct MI250X", "tf32"), "(none)") << "no TF32 there";
  EXPECT_EQ(peak_label("NVIDIA GeForce RTX 4090", "bf16"), "(none)");
  EXPECT_EQ(peak_label("NVIDIA H100 80GB HBM3", "int8"), "(none)");
}

}  // namespace
}  // namespace ddpx
