// A GPU's properties as the GPU library reports them (gpu_api.h); apart, so that device.h has
// them without c10d's headers.
#pragma once

#include <cstdint>
#include <string>

namespace ddpx::dist::gpu {

// A device's properties as libtorch's CUDA (HIP) runtime reports them.
struct Properties {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability (ROCm: the gfx version's major and minor)
  int multiprocessors = 0;
  int64_t total_memory = 0;  // bytes
};

}  // namespace ddpx::dist::gpu
