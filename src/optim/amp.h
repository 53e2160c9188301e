// Mixed precision (`--amp`): autocast regions around forward and loss, with fp32 weights and
// optimizer state. bf16 needs no loss scaling and runs on CPU too (ATen's CPU autocast); fp16
// needs dynamic loss scaling (optim/loss_scaler.h) and a GPU.
#pragma once

#include <torch/types.h>

#include <optional>

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
