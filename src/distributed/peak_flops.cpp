// The GPU peak table (see peak_flops.h).
#include "distributed/peak_flops.h"

#include <ATen/Context.h>

#include <array>
#include <cctype>

#include "distributed/device.h"

namespace ddpx::dist {
namespace {

struct Row {
  const char* label;
  std::array<const char*, 3> match;  // every non-null part must occur in the folded name
  double fp32, tf32, bf16, fp16;     // dense TFLOP/s; 0: no such unit
};

// Names are matched folded (lower case, spaces dropped), because the tools spell one GPU several
// ways: "NVIDIA RTX A6000" on the bare card, "NVIDIA RTXA6000-24Q" for a vGPU profile of it,
// "AMD Instinct MI300X VF" for a virtual function. First match wins, so the more specific rows
// come first (GH200 before H200, which it contains). Sources: NVIDIA H100/H200, GH200, A100,
// L40S and RTX A6000 data sheets (tensor-core figures halved where quoted with sparsity); AMD
// Instinct MI300X and MI250X data sheets (matrix cores).
constexpr Row kRows[] = {
    {"GH200", {"gh200", nullptr, nullptr}, 67.0, 494.7, 989.4, 989.4},
    {"H200 NVL", {"h200", "nvl", nullptr}, 60.0, 417.5, 835.0, 835.0},
    {"H200 SXM", {"h200", nullptr, nullptr}, 67.0, 494.7, 989.4, 989.4},
    {"H100 PCIe", {"h100", "pcie", nullptr}, 51.2, 378.0, 756.0, 756.0},
    {"H100 NVL", {"h100", "nvl", nullptr}, 60.0, 417.5, 835.0, 835.0},
    {"H100 SXM", {"h100", nullptr, nullptr}, 67.0, 494.7, 989.4, 989.4},
    {"A100", {"a100", nullptr, nullptr}, 19.5, 156.0, 312.0, 312.0},
    {"L40S", {"l40s", nullptr, nullptr}, 91.6, 183.0, 362.1, 362.1},
    {"RTX A6000", {"rtxa6000", nullptr, nullptr}, 38.7, 77.4, 154.8, 154.8},
    {"MI300X", {"mi300x", nullptr, nullptr}, 163.4, 653.7, 1307.4, 1307.4},
    {"MI250X", {"mi250x", nullptr, nullptr}, 95.7, 0.0, 383.0, 383.0},
};

std::string fold(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (!std::isspace(static_cast<unsigned char>(ch)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

}  // namespace

std::optional<GpuPeak> gpu_peak(const std::string& device_name, const std::string& dtype) {
  const std::string name = fold(device_name);
  for (const Row& row : kRows) {
    bool all = true;
    for (const char* part : row.match) {
      if (part != nullptr && name.find(part) == std::string::npos) all = false;
    }
    if (!all) continue;
    double tflops = dtype == "fp32"   ? row.fp32
                    : dtype == "tf32" ? row.tf32
                    : dtype == "bf16" ? row.bf16
                    : dtype == "fp16" ? row.fp16
                                      : 0.0;
    if (tflops <= 0) return std::nullopt;
    return GpuPeak{row.label, tflops};
  }
  return std::nullopt;
}

std::optional<DevicePeak> device_peak(const torch::Device& device, optim::Amp amp) {
  if (!device.is_cuda()) return std::nullopt;
  const char* compute = amp == optim::Amp::kBf16               ? "bf16"
                        : amp == optim::Amp::kFp16             ? "fp16"
                        : at::globalContext().allowTF32CuDNN() ? "tf32"
                                                               : "fp32";
  auto peak = gpu_peak(device_name(device), compute);
  if (!peak) return std::nullopt;
  return DevicePeak{compute, *peak};
}

}  // namespace ddpx::dist
