// The host's figures for /metrics and /api/v1/host: CPU use since the previous reading
// (/proc/stat), memory (/proc/meminfo), and per-GPU utilization, memory, temperature and power
// from the vendor's tool where one answers (gpu_readings.h: nvidia-smi, amd-smi, rocm-smi; none
// here: the CPU figures are what this machine has).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/gpu_readings.h"

namespace ddpx::serve {

class Store;

struct HostReading {
  double cpu_pct = 0;  // all cores, since the previous reading
  double memory_used_gib = 0, memory_total_gib = 0;
  int cores = 0;
  std::vector<GpuReading> gpus;
};

HostReading read_host();
nlohmann::json host_json(const HostReading& host);
std::string prometheus_text(Store& store, int total_slots);

}  // namespace ddpx::serve
