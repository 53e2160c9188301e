// The GPU library (distributed/gpu/gpu_api.h) loaded where it can be used. A build with CUDA (or
// ROCm) compiles and links libddpx-gpu.so, and with it libtorch_cuda (libtorch_hip) and the CUDA
// libraries; a process loads them only where a GPU driver is installed, so ranks that train on
// CPUs never map them. Every executable that links ddpx_distributed loads it as it starts
// (before main), since libtorch decides once, at its first question about CUDA, whether CUDA is
// there; the functions below load it too, for any question that comes earlier.
//
// DDPX_GPU_LIBRARY: unset (or "auto"): load where libcuda.so.1 loads (NVIDIA's driver) or
// /dev/kfd exists (AMD's); "1": load whatever the machine; "0": never (CPU only).
#pragma once

#include <string>

#include "distributed/gpu/gpu_api.h"

namespace ddpx::dist {

// The library's table, loaded on the first call; null where it is not loaded (no driver, a
// build without CUDA, DDPX_GPU_LIBRARY=0). Throws ddpx::Error(kInternal) naming the file when it
// should load and does not (an incomplete install), with DDPX_GPU_LIBRARY=0 as the way out.
const gpu::Api* gpu_api();

// The table whatever the machine (`ddpx doctor` checks that the library links); null only in a
// build without CUDA. Throws as gpu_api().
const gpu::Api* load_gpu_api();

// "loaded from PATH", or why it is not loaded (for `ddpx doctor`).
std::string gpu_library_status();

}  // namespace ddpx::dist
