// Mixed precision on CPU: autocast regions (bf16 on CPU, as --amp bf16) and the fp16 refusal on
// CPU.
#include "optim/amp.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"

namespace ddpx::optim {
namespace {

TEST(AmpTest, Bf16AutocastOnCpuComputesInBf16InsideAndRestoresAfter) {
  torch::nn::Linear linear(8, 4);
  auto x = torch::randn({2, 8});
  {
    AutocastGuard guard(Amp::kBf16, torch::kCPU);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16);
    // Weights stay fp32: autocast casts copies for the op.
    EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat32);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(linear(x).scalar_type(), torch::kFloat32);
}

TEST(AmpTest, OffChangesNothing) {
  torch::nn::Linear linear(8, 4);
  AutocastGuard guard(Amp::kOff, torch::kCPU);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(linear(torch::randn({2, 8})).scalar_type(), torch::kFloat32);
}

TEST(AmpTest, Fp16OnCpuIsRefusedInOneLineNamingTheWayOut) {
  try {
    check_amp(Amp::kFp16, torch::kCPU);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    std::string message = e.what();
    EXPECT_NE(message.find("--amp fp16"), std::string::npos) << message;
    EXPECT_NE(message.find("--amp bf16"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(check_amp(Amp::kBf16, torch::kCPU));
  EXPECT_NO_THROW(check_amp(Amp::kFp16, torch::Device(torch::kCUDA, 0)));
}

}  // namespace
}  // namespace ddpx::optim
