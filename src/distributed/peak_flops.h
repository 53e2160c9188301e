// Published dense (no sparsity) peak FLOP/s of common GPUs per dtype, from the vendors' data
// sheets, to state a GEMM's or a training run's share of what the chip can do. A GPU not in the
// table has no peak ("peak unknown"), never a guess.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

#include "optim/amp.h"

namespace ddpx::dist {

struct GpuPeak {
  std::string label;  // the table row that matched, e.g. "H100 SXM"
  double tflops = 0;  // dense peak for the dtype asked
};

// `device_name` as the driver reports it ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X");
// `dtype` one of fp32, tf32, bf16, fp16. Empty when the GPU or the dtype is not in the table.
std::optional<GpuPeak> gpu_peak(const std::string& device_name, const std::string& dtype);

// What a GPU computes in under `amp` ("bf16", "fp16", or "tf32" / "fp32" by libtorch's TF32
// setting), and the table's peak for it: empty on a CPU or a GPU not in the table.
struct DevicePeak {
  std::string dtype;
  GpuPeak peak;
};
std::optional<DevicePeak> device_peak(const torch::Device& device, optim::Amp amp);

}  // namespace ddpx::dist
