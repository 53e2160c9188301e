// The host's figures for /metrics and /api/v1/host: CPU use since the previous reading
// (/proc/stat), memory (/proc/meminfo), and per-GPU utilization, memory, temperature and power
// from nvidia-smi where it exists (none here: the CPU figures are what this machine has).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ddpx::serve {

class Store;

struct GpuReading {
  int index = 0;
  double utilization_pct = 0, memory_used_mib = 0, memory_total_mib = 0, temperature_c = 0,
         power_w = 0;
};

struct HostReading {
  double cpu_pct = 0;  // all cores, since the previous reading
  double memory_used_gib = 0, memory_total_gib = 0;
  int cores = 0;
  std::vector<GpuReading> gpus;
};

HostReading read_host();
// The GPUs in `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,
// temperature.gpu,power.draw --format=csv,noheader,nounits` output; a figure the GPU does not
// report ("[N/A]", "[Not Supported]") reads 0, a line without the first four is skipped.
std::vector<GpuReading> parse_nvidia_smi_gpus(const std::string& csv);
nlohmann::json host_json(const HostReading& host);
std::string prometheus_text(Store& store, int total_slots);

}  // namespace ddpx::serve
