// Mixed precision (`--amp`): autocast regions around forward and loss, with fp32 weights and
// optimizer state. bf16 needs no loss scaling and runs on CPU too (ATen's CPU autocast); fp16
// needs dynamic loss scaling (optim/loss_scaler.h) and a GPU.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

#include "core/names.h"

namespace ddpx::optim {

enum class Amp { kOff, kBf16, kFp16 };
inline constexpr NameTable<Amp, 3> kAmpNames{
    {{Amp::kOff, "off"}, {Amp::kBf16, "bf16"}, {Amp::kFp16, "fp16"}}};
inline const char* name(Amp amp) { return name_of(kAmpNames, amp); }

// The dtype autocast computes in (none for kOff).
std::optional<torch::ScalarType> amp_dtype(Amp amp);

// Throws ddpx::Error(kUsage) for a precision the device cannot take (fp16 on CPU).
void check_amp(Amp amp, const torch::Device& device);

// "" or a warning for a precision the device takes only slowly: bf16 on a CPU whose flags in
// `cpuinfo_flags` (/proc/cpuinfo's "flags" line) name no native bf16 (avx512_bf16, amx_bf16),
// where ATen's bf16 convolutions and matrix products are emulated, often 10-50x slower than fp32.
std::string amp_speed_note(Amp amp, const torch::Device& device, const std::string& cpuinfo_flags);

// This machine's /proc/cpuinfo "flags" line ("" where there is none).
std::string cpuinfo_flags();

// Autocast on `device`'s type for the guard's lifetime, in `amp`'s dtype (nothing for kOff), as
// `with torch.autocast(device_type, dtype)`: nesting is counted and the cast cache cleared when
// the outermost region ends. Not copyable; one thread.
class AutocastGuard {
 public:
  AutocastGuard(Amp amp, const torch::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace ddpx::optim
