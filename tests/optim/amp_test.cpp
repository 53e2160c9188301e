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

// Flags as /proc/cpuinfo prints them on an AVX2-only AMD EPYC and on a Sapphire Rapids Xeon.
TEST(AmpTest, Bf16OnACpuWithoutNativeBf16IsNamedAsSlow) {
  const std::string avx2 = " fpu vme sse sse2 avx fma avx2 bmi2 sha_ni";
  const std::string spr = " fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile";
  std::string note = amp_speed_note(Amp::kBf16, torch::kCPU, avx2);
  EXPECT_NE(note.find("no native bf16"), std::string::npos) << note;
  EXPECT_NE(note.find("--amp off"), std::string::npos) << note;
  EXPECT_EQ(amp_speed_note(Amp::kBf16, torch::kCPU, spr), "");
  EXPECT_EQ(amp_speed_note(Amp::kOff, torch::kCPU, avx2), "");
  EXPECT_EQ(amp_speed_note(Amp::kBf16, torch::Device(torch::kCUDA, 0), avx2), "");
  // A flag that only starts with the name is not the flag.
  EXPECT_NE(amp_speed_note(Amp::kBf16, torch::kCPU, " avx512_bf16x"), "");
}

}  // namespace
}  // namespace ddpx::optim
