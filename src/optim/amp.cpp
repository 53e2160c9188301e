// Mixed precision (see amp.h).
#include "optim/amp.h"

#include <ATen/autocast_mode.h>

#include <fstream>

#include "core/error.h"

namespace ddpx::optim {

namespace {

// Whether the space-separated `flags` hold `flag` as a whole word.
bool has_flag(const std::string& flags, const char* flag) {
  std::string padded = " " + flags + " ";
  for (char& c : padded)
    if (c == '\t' || c == '\n') c = ' ';
  return padded.find(std::string(" ") + flag + " ") != std::string::npos;
}

}  // namespace

Bf16Support cpu_bf16_support(const std::string& flags) {
  const bool avx512 = has_flag(flags, "avx512_bf16"), amx = has_flag(flags, "amx_bf16");
  if (!avx512 && !amx) return {false, "no native bf16 on this CPU; bf16 would be emulated"};
  return {true, std::string("this CPU has ") + (avx512 && amx ? "AVX512-BF16 and AMX-BF16"
                                                : avx512      ? "AVX512-BF16"
                                                              : "AMX-BF16")};
}

AmpChoice resolve_amp(Amp requested, const Bf16Support& device) {
  if (requested != Amp::kAuto) return {requested, ""};
  return {device.native ? Amp::kBf16 : Amp::kOff, "auto: " + device.why};
}

std::optional<torch::ScalarType> amp_dtype(Amp amp) {
  switch (amp) {
    case Amp::kBf16:
      return torch::kBFloat16;
    case Amp::kFp16:
      return torch::kHalf;
    case Amp::kOff:
      break;
    case Amp::kAuto:
      fail(ErrorKind::kInternal, "--amp auto reached autocast unresolved (optim::resolve_amp)");
  }
  return std::nullopt;
}

void check_amp(Amp amp, const torch::Device& device) {
  DDPX_CHECK(amp != Amp::kFp16 || device.is_cuda(), ErrorKind::kUsage,
             "--amp fp16 needs a GPU and this run trains on {}; use --amp bf16 (autocast on CPU) "
             "or --amp off",
             device.str());
}

std::string amp_speed_note(Amp amp, const torch::Device& device, const std::string& flags) {
  if (amp != Amp::kBf16 || !device.is_cpu() || cpu_bf16_support(flags).native) return "";
  return "note: this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo): "
         "--amp bf16 is emulated here and often 10-50x slower than fp32; --amp off trains faster";
}

std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1);
  }
  return "";
}

AutocastGuard::AutocastGuard(Amp amp, const torch::Device& device) {
  auto dtype = amp_dtype(amp);
  if (!dtype) return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
}

}  // namespace ddpx::optim
