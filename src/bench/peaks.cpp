// The GPU peak table (see peaks.h).
#include "bench/peaks.h"

#include <array>

namespace ddpx::bench {
namespace {

struct Row {
  const char* label;
  std::array<const char*, 3> match;  // every non-null part must occur in the name
  double fp32, tf32, bf16, fp16;     // dense TFLOP/s; 0: no such unit
};

// First match wins, so the more specific rows come first. Sources: NVIDIA H100/H200, A100,
// L40S and RTX A6000 data sheets (tensor-core figures halved where quoted with sparsity); AMD
// Instinct MI300X and MI250X data sheets (matrix cores).
constexpr Row kRows[] = {
    {"H200 NVL", {"H200", "NVL", nullptr}, 60.0, 417.5, 835.0, 835.0},
    {"H200 SXM", {"H200", nullptr, nullptr}, 67.0, 494.7, 989.4, 989.4},
    {"H100 PCIe", {"H100", "PCIe", nullptr}, 51.2, 378.0, 756.0, 756.0},
    {"H100 NVL", {"H100", "NVL", nullptr}, 60.0, 417.5, 835.0, 835.0},
    {"H100 SXM", {"H100", nullptr, nullptr}, 67.0, 494.7, 989.4, 989.4},
    {"A100", {"A100", nullptr, nullptr}, 19.5, 156.0, 312.0, 312.0},
    {"L40S", {"L40S", nullptr, nullptr}, 91.6, 183.0, 362.1, 362.1},
    {"RTX A6000", {"RTX A6000", nullptr, nullptr}, 38.7, 77.4, 154.8, 154.8},
    {"MI300X", {"MI300X", nullptr, nullptr}, 163.4, 653.7, 1307.4, 1307.4},
    {"MI250X", {"MI250X", nullptr, nullptr}, 95.7, 0.0, 383.0, 383.0},
};

}  // namespace

std::optional<GpuPeak> gpu_peak(const std::string& device_name, const std::string& dtype) {
  for (const Row& row : kRows) {
    bool all = true;
    for (const char* part : row.match) {
      if (part != nullptr && device_name.find(part) == std::string::npos) all = false;
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

}  // namespace ddpx::bench
