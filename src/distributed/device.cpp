// Device selection (see device.h).
#include "distributed/device.h"

#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/gpu_library.h"

namespace ddpx::dist {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What restricted this process's view of the GPUs, for error messages.
std::string visible_variables() {
  std::string text;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    if (auto value = env::get(name)) text += fmt::format(" {}='{}'", name, *value);
  }
  return text.empty() ? " no *_VISIBLE_DEVICES variable set" : text;
}

}  // namespace

int device_index_for(int local_rank, int local_world_size, int visible_gpus) {
  DDPX_CHECK(visible_gpus > 0, ErrorKind::kUsage, "no GPU is visible to local rank {}", local_rank);
  if (visible_gpus == 1) return 0;
  DDPX_CHECK(local_rank < visible_gpus, ErrorKind::kUsage,
             "LOCAL_RANK {} of {} local ranks has no GPU of its own: this process sees {} GPUs; "
             "start at most {} workers on this node, or give each worker one GPU "
             "(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)",
             local_rank, local_world_size, visible_gpus, visible_gpus);
  return local_rank;
}

std::optional<std::string> assigned_gpu_unseen(int visible_gpus) {
  if (visible_gpus > 0) return std::nullopt;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    auto value = env::get(name);
    // Empty or -1: the user hid every GPU on purpose.
    if (!value || value->empty() || value->rfind("-1", 0) == 0) continue;
    return fmt::format(
        "{}='{}' gives this process a GPU, but libtorch sees none (no driver, or a driver "
        "older than the CUDA runtime of this torch): training on the CPU; `ddpx doctor` checks "
        "the driver and the runtime",
        name, *value);
  }
  return std::nullopt;
}

int visible_gpus() {
  if (gpu_api() == nullptr) return 0;  // no GPU library: libtorch would see no GPU either
  return static_cast<int>(torch::cuda::device_count());
}

std::optional<gpu::Properties> gpu_properties(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  const gpu::Api* api = gpu_api();
  if (api == nullptr) return std::nullopt;
  return api->properties(device.index());
}

torch::Device select_device(DeviceChoice choice, const WorldInfo& world) {
  const int visible = visible_gpus();
  if (choice == DeviceChoice::kAuto && visible == 0) {
    // `ddpx run` assigned a GPU (or the user named one) that libtorch cannot open: say so
    // rather than train on the CPU without a word.
    if (auto unseen = assigned_gpu_unseen(visible)) log::warn("rank {}: {}", world.rank, *unseen);
    return torch::Device(torch::kCPU);
  }
  if (choice == DeviceChoice::kCpu) return torch::Device(torch::kCPU);
#ifndef DDPX_WITH_CUDA
  fail(ErrorKind::kUsage,
       "--device cuda: this ddpx was built without CUDA (DDPX_WITH_CUDA=OFF); rebuild against a "
       "CUDA or ROCm torch, or use --device cpu");
#else
  DDPX_CHECK(visible > 0, ErrorKind::kUsage,
             "--device cuda: rank {} sees no GPU ({}; no driver or no device); use --device cpu "
             "or auto, or check nvidia-smi / rocm-smi",
             world.rank, visible_variables().substr(1));
  const int index = device_index_for(world.local_rank, world.local_world_size, visible);
  try {
    at::accelerator::setDeviceIndex(static_cast<c10::DeviceIndex>(index));
  } catch (const c10::Error& e) {
    // An exclusive-process GPU that another job holds fails here.
    fail(ErrorKind::kUsage,
         "rank {} cannot use GPU {} ({}): {}; it may be held by another job in exclusive mode: "
         "pick a free GPU with CUDA_VISIBLE_DEVICES or stop that job",
         world.rank, index, visible_variables().substr(1), e.what_without_backtrace());
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#endif
}

std::optional<DeviceMemory> device_memory(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  auto [free_bytes, total_bytes] = at::accelerator::getMemoryInfo(device.index());
  return DeviceMemory{free_bytes, total_bytes};
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

std::string device_name(const torch::Device& device) {
  if (auto p = gpu_properties(device)) return p->name;
  return device.str();
}

optim::Bf16Support bf16_support(const torch::Device& device) {
  if (auto p = gpu_properties(device)) {
    const std::string gpu =
        fmt::format("{} (compute capability {}.{})", p->name, p->major, p->minor);
    if (p->major >= 8) return {true, gpu + " computes bf16"};
    return {false, gpu + " has no native bf16; --amp fp16 uses its tensor cores"};
  }
  return optim::cpu_bf16_support(optim::cpuinfo_flags());
}

std::string describe_device(const torch::Device& device) {
  auto memory = device_memory(device);
  if (!memory) return device.str();
  return fmt::format("{} {}, {:.1f} GiB ({:.1f} GiB in use)", device.str(), device_name(device),
                     memory->total_bytes / kGiB, (memory->total_bytes - memory->free_bytes) / kGiB);
}

std::optional<BusyVerdict> judge_busy_gpu(const std::string& what, const DeviceMemory& memory) {
  if (memory.total_bytes == 0) return std::nullopt;
  const double used = static_cast<double>(memory.total_bytes - memory.free_bytes);
  const double share = used / static_cast<double>(memory.total_bytes);
  // A CUDA context alone takes a few hundred MiB; more than 5% is somebody else's work.
  if (share <= 0.05) return std::nullopt;
  BusyVerdict verdict;
  verdict.fatal = share > 0.5;
  verdict.message = fmt::format(
      "{} already has {:.1f} of {:.1f} GiB in use by other processes{}; pick a free GPU "
      "(ddpx run picks them; else CUDA_VISIBLE_DEVICES) or stop the job that holds it",
      what, used / kGiB, memory.total_bytes / kGiB, verdict.fatal ? " (another job holds it)" : "");
  return verdict;
}

bool is_out_of_memory(const std::exception& e) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr ||
         (dynamic_cast<const c10::Error*>(&e) != nullptr &&
          std::string(e.what()).find("out of memory") != std::string::npos);
}

}  // namespace ddpx::dist
