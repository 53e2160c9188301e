// Mixed precision on CPU: autocast regions (bf16 on CPU, as --amp bf16), the fp16 refusal on
// CPU, and what --amp auto chooses from a CPU's flags.
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

// --amp auto from the flags /proc/cpuinfo prints: bf16 with AVX512-BF16 (AMD Zen 4, Cooper Lake),
// AMX-BF16 or both (Sapphire Rapids), fp32 on AVX2 alone or AVX-512 without its bf16 extension.
TEST(AmpTest, AutoIsBf16ExactlyWhereTheCpuHasNativeBf16) {
  const std::string avx2 = " fpu vme sse sse2 avx fma avx2 bmi2 sha_ni";
  const std::string skylake = " sse2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni";
  const std::string zen4 = " avx2 avx512f avx512_bf16 avx512_vnni";
  const std::string spr = " fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile";
  const std::string amx_only = "\tamx_tile amx_bf16\tamx_int8";
  EXPECT_EQ(cpu_bf16_support(zen4).why, "this CPU has AVX512-BF16");
  EXPECT_EQ(cpu_bf16_support(spr).why, "this CPU has AVX512-BF16 and AMX-BF16");
  EXPECT_EQ(cpu_bf16_support(amx_only).why, "this CPU has AMX-BF16");
  for (const std::string& flags : {zen4, spr, amx_only}) {
    const AmpChoice choice = resolve_amp(Amp::kAuto, cpu_bf16_support(flags));
    EXPECT_EQ(choice.amp, Amp::kBf16) << flags;
    EXPECT_EQ(choice.reason, "auto: " + cpu_bf16_support(flags).why) << flags;
  }
  for (const std::string& flags :
       {avx2, skylake, std::string(" avx512_bf16x amx_bf16_"), std::string()}) {
    const AmpChoice choice = resolve_amp(Amp::kAuto, cpu_bf16_support(flags));
    EXPECT_EQ(choice.amp, Amp::kOff) << flags;
    EXPECT_EQ(choice.reason, "auto: no native bf16 on this CPU; bf16 would be emulated") << flags;
  }
  // A GPU's support comes from dist::bf16_support; given values stay as given, with no reason.
  EXPECT_EQ(
      resolve_amp(Amp::kAuto, {true, "NVIDIA H100 (compute capability 9.0) computes bf16"}).reason,
      "auto: NVIDIA H100 (compute capability 9.0) computes bf16");
  EXPECT_EQ(resolve_amp(Amp::kAuto, {false, "V100 has none"}).amp, Amp::kOff);
  for (Amp given : {Amp::kOff, Amp::kBf16, Amp::kFp16}) {
    const AmpChoice choice = resolve_amp(given, cpu_bf16_support(avx2));
    EXPECT_EQ(choice.amp, given);
    EXPECT_EQ(choice.reason, "");
  }
  // Unresolved, auto reaches no autocast.
  EXPECT_THROW(amp_dtype(Amp::kAuto), Error);
  EXPECT_THROW(AutocastGuard(Amp::kAuto, torch::kCPU), Error);
  EXPECT_TRUE(parse_name(kAmpNames, "auto") == Amp::kAuto);
}

}  // namespace
}  // namespace ddpx::optim
