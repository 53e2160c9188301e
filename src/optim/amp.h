// Mixed precision (`--amp`): autocast regions around forward and loss, with fp32 weights and
// optimizer state. bf16 needs no loss scaling and runs on CPU too (ATen's CPU autocast); fp16
// needs dynamic loss scaling (optim/loss_scaler.h) and a GPU. `auto` is bf16 where the device
// computes bf16 natively and fp32 elsewhere, decided once per run (resolve_amp) before anything
// else reads the choice.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

#include "core/names.h"

namespace ddpx::optim {

enum class Amp { kOff, kBf16, kFp16, kAuto };
inline constexpr NameTable<Amp, 4> kAmpNames{
    {{Amp::kOff, "off"}, {Amp::kBf16, "bf16"}, {Amp::kFp16, "fp16"}, {Amp::kAuto, "auto"}}};
inline const char* name(Amp amp) { return name_of(kAmpNames, amp); }

// Whether a device computes bf16 natively, in the words the start-up line gives as the reason:
// "this CPU has AVX512-BF16", "no native bf16 on this CPU; bf16 would be emulated".
struct Bf16Support {
  bool native = false;
  std::string why;
};

// A CPU's, from its /proc/cpuinfo "flags" (`cpuinfo_flags`): native with avx512_bf16 (AVX512-BF16:
// bf16 dot products in the vector units) or amx_bf16 (AMX-BF16: bf16 tile matrix products), the
// instructions oneDNN's bf16 convolutions and matrix products use; without them ATen converts to
// fp32 and back around every operation, often 10-50x slower than fp32 itself.
Bf16Support cpu_bf16_support(const std::string& cpuinfo_flags);

// What `--amp` means on a device whose bf16 is `device` (for a CPU, cpu_bf16_support; for a GPU,
// dist::bf16_support): `auto` becomes bf16 or off, with the reason ("auto: this CPU has
// AVX512-BF16"); any other value is kept, with no reason.
struct AmpChoice {
  Amp amp = Amp::kOff;
  std::string reason;  // "" unless --amp auto decided
};
AmpChoice resolve_amp(Amp requested, const Bf16Support& device);

// The dtype autocast computes in (none for kOff). Throws for kAuto: resolve it first.
std::optional<torch::ScalarType> amp_dtype(Amp amp);

// Throws ddpx::Error(kUsage) for a precision the device cannot take (fp16 on CPU).
void check_amp(Amp amp, const torch::Device& device);

// "" or a warning for a precision the device takes only slowly: bf16 on a CPU whose flags in
// `cpuinfo_flags` (/proc/cpuinfo's "flags" line) name no native bf16 (avx512_bf16, amx_bf16),
// where ATen's bf16 convolutions and matrix products are emulated, often 10-50x slower than fp32.
std::string amp_speed_note(Amp amp, const torch::Device& device, const std::string& cpuinfo_flags);

// This machine's /proc/cpuinfo "flags" line ("" where there is none).
std::string cpuinfo_flags();

// Autocast on `device`'s type for the guard's lifetime, in `amp`'s dtype (nothing for kOff; kAuto
// must be resolved first), as
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
