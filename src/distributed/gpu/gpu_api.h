// What ddpx does with a GPU beyond libtorch's device-generic API, as a table of functions that
// the GPU library (libddpx-gpu.so, built from gpu_api.cpp against libtorch_cuda or
// libtorch_hip) hands to the rest of ddpx: a device's properties, an NCCL (RCCL) process group,
// NCCL's version.
//
// The library is built and linked in every build that has CUDA (or ROCm), and loaded at run time
// by distributed/gpu_library.h where a GPU driver is installed. A process that trains on CPUs
// then never loads libtorch_cuda and the CUDA libraries: 0.13 s and 355 MB less at every start
// of ddpx-torch (2-core AMD EPYC VM, torch 2.11+cu130, 2026-12-07), which ranks on a CPU host pay
// once each.
//
// Both sides are built by the same compiler from the same headers, so the table passes C++
// types. Its functions throw std::exception subclasses; the loader turns them into ddpx errors.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/gpu/gpu_properties.h"

namespace ddpx::dist::gpu {

// Bumped when the table changes, so that a library from another build is refused.
inline constexpr int kApiVersion = 1;

struct Api {
  int version = kApiVersion;
  Properties (*properties)(int device) = nullptr;
  c10::intrusive_ptr<c10d::Backend> (*make_nccl)(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int world_size,
                                                 std::chrono::milliseconds timeout) = nullptr;
  std::string (*nccl_version)() = nullptr;
};

}  // namespace ddpx::dist::gpu

// The library's one exported symbol.
extern "C" const ddpx::dist::gpu::Api* ddpx_gpu_api();
