// The device a rank trains on. `--device auto` is the GPU when this process sees one. Under
// `ddpx run` each worker sees only its own GPU (the launcher sets CUDA_VISIBLE_DEVICES or
// HIP_VISIBLE_DEVICES), so it takes GPU 0; under torchrun, Slurm or MPI a worker may see every
// GPU of its node and takes the one of its LOCAL_RANK, as PyTorch scripts do with
// torch.cuda.set_device(local_rank). ROCm builds of libtorch keep the CUDA names, so "cuda"
// covers AMD GPUs too.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "distributed/choices.h"
#include "distributed/gpu/gpu_properties.h"
#include "distributed/world.h"
#include "optim/amp.h"

namespace ddpx::dist {

// The GPU index (among the visible ones) of a local rank. One visible GPU: every rank takes it
// (the launcher gave each worker its own, or ranks share one on purpose). Several: the local
// rank's. Throws ddpx::Error(kUsage) when there are fewer GPUs than local ranks need.
int device_index_for(int local_rank, int local_world_size, int visible_gpus);

// With `visible_gpus` 0: the warning to print when a *_VISIBLE_DEVICES variable still names a
// GPU for this process (`ddpx run` assigned one that libtorch cannot see); nullopt otherwise.
std::optional<std::string> assigned_gpu_unseen(int visible_gpus);

// The GPUs this process sees (0 where the GPU library is not loaded: no driver, see
// gpu_library.h), and a GPU's properties (nullopt for the CPU).
int visible_gpus();
std::optional<gpu::Properties> gpu_properties(const torch::Device& device);

// The device this process trains on, made current (later CUDA work and NCCL use it). Throws
// ddpx::Error(kUsage) for `--device cuda` where no GPU is visible, naming the visible-devices
// variables; `--device auto` falls back to the CPU, with a warning when a GPU was assigned.
torch::Device select_device(DeviceChoice choice, const WorldInfo& world);

// For the start-up header: "cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB (0.5 GiB in use)" or "cpu".
std::string describe_device(const torch::Device& device);

// Whether `device` computes bf16 natively (what `--amp auto` asks): a CPU with AVX512-BF16 or
// AMX-BF16 in /proc/cpuinfo, a GPU of compute capability 8.0 or newer (NVIDIA Ampere on; on ROCm
// the gfx major, 9 and up for the MI series).
optim::Bf16Support bf16_support(const torch::Device& device);

// Free and total memory of a GPU (empty for the CPU).
struct DeviceMemory {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};
std::optional<DeviceMemory> device_memory(const torch::Device& device);
std::string device_name(const torch::Device& device);  // "NVIDIA H100 80GB HBM3", "cpu"
// Waits for the work queued on a GPU (timing, a benchmark's window); nothing on a CPU.
void synchronize(const torch::Device& device);

// Whether a GPU looks taken by another job before this one allocated anything: nullopt when
// free enough, else the line to print. `fatal` is set when more than half its memory is in use
// (this job would fail or crawl); a smaller share only warns.
struct BusyVerdict {
  bool fatal = false;
  std::string message;
};
std::optional<BusyVerdict> judge_busy_gpu(const std::string& what, const DeviceMemory& memory);

// A GPU out-of-memory error, whatever type it reached the caller as (c10::OutOfMemoryError, or
// a c10::Error saying "out of memory" from a library below).
bool is_out_of_memory(const std::exception& e);

}  // namespace ddpx::dist
