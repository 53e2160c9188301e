// The GPU library, libddpx-gpu.so (see gpu_api.h): the only ddpx code that names libtorch_cuda's
// API. It links libtorch with its CUDA (HIP) part and nothing of ddpx, and so it reports
// failures as exceptions of the standard library, not ddpx's.
#include "distributed/gpu/gpu_api.h"

#include <ATen/cuda/CUDAContext.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace ddpx::dist::gpu {
namespace {

Properties properties(int device) {
  const auto* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
  Properties out;
  out.name = p->name;
  out.major = p->major;
  out.minor = p->minor;
  out.multiprocessors = p->multiProcessorCount;
  out.total_memory = static_cast<int64_t>(p->totalGlobalMem);
  return out;
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int world_size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

std::string nccl_version() { return c10d::getNcclVersion(); }

}  // namespace
}  // namespace ddpx::dist::gpu

extern "C" const ddpx::dist::gpu::Api* ddpx_gpu_api() {
  static const ddpx::dist::gpu::Api api = [] {
    ddpx::dist::gpu::Api a;
    a.properties = &ddpx::dist::gpu::properties;
    a.make_nccl = &ddpx::dist::gpu::make_nccl;
    a.nccl_version = &ddpx::dist::gpu::nccl_version;
    return a;
  }();
  return &api;
}
