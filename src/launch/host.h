// What the launcher needs to know about this machine: usable cores, visible GPUs, where a
// program lives, and the path of the running ddpx binary. GPUs are only ever detected, never
// assumed: on a machine without them the list is empty.
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

enum class GpuVendor { kNone, kNvidia, kAmd };

struct GpuInfo {
  GpuVendor vendor = GpuVendor::kNone;
  std::vector<std::string> ids;  // device ids as the visible-devices variable spells them
};

// The variable that restricts a worker to its GPU: CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES.
const char* visible_devices_variable(GpuVendor vendor);

int usable_cpu_count();  // sched_getaffinity, so taskset/cgroup cpusets are honoured
GpuInfo detect_gpus();   // /dev/nvidiaN, nvidia-smi -L, /dev/kfd + /dev/dri/renderD*

// `name` with a '/' is used as a path; otherwise searched on PATH. Throws kUsage when there is
// no such executable file.
std::string find_program(const std::string& name);

std::string self_executable();  // /proc/self/exe

// Checks --master_addr before any worker starts: it must resolve, and on node 0 (which hosts the
// rendezvous there) be an address of this host. Throws kUsage naming the flag, listing this
// host's addresses.
void check_master_addr(const std::string& addr, bool this_node_hosts_it);

}  // namespace ddpx::launch
