#include <fmt/format.h>
#include <torch/cuda.h>

#include "doctor/checks.h"

namespace ddpx::doctor {

void check_build(Report& r) {
  r.add("ddpx", "version", fmt::format("ddpx 0.1.0, C++{}", __cplusplus / 100 % 100));
  std::string cuda = DDPX_BUILD_TORCH_CUDA, hip = DDPX_BUILD_TORCH_HIP;
  std::string kind = !hip.empty() ? "ROCm " + hip : !cuda.empty() ? "CUDA " + cuda : "CPU only";
  r.add("torch", "libtorch", fmt::format("{} ({})", DDPX_BUILD_TORCH_VERSION, kind));
#ifdef DDPX_WITH_CUDA
  r.add("torch", "GPU code", "compiled in (NCCL/RCCL backend, CUDA/HIP streams)");
#else
  r.add("torch", "GPU code", "not compiled in: this ddpx trains on CPU only", Verdict::kWarn,
        "build against PyTorch's CUDA or ROCm wheel (scripts/requirements.txt) for GPUs");
#endif
}

}  // namespace ddpx::doctor
