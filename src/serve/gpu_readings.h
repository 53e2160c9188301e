// Per-GPU figures for the job service (/api/v1/host, /metrics, the dashboard), read from the
// vendor's tool on the host: nvidia-smi's CSV query on NVIDIA hosts; on AMD hosts amd-smi's JSON
// (`amd-smi metric --json`, and `amd-smi static --partition --json` for the MI300X compute and
// memory partition modes), or rocm-smi's JSON where amd-smi is missing (older ROCm). A figure a
// GPU does not report ("N/A", "[Not Supported]") reads 0; the parsers never throw on the tools'
// text, they skip what is not a GPU.
#pragma once

#include <string>
#include <vector>

namespace ddpx::serve {

struct GpuReading {
  int index = 0;
  std::string vendor;  // "nvidia" or "amd"
  double utilization_pct = 0, memory_used_mib = 0, memory_total_mib = 0, temperature_c = 0,
         power_w = 0;
  std::string compute_partition, memory_partition;  // AMD: "SPX", "NPS1", ...; else empty
};

// The GPUs of this host: nvidia-smi, else amd-smi, else rocm-smi; none when no tool answers.
std::vector<GpuReading> read_gpus();

// `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,
// power.draw --format=csv,noheader,nounits`; a line without the first four is skipped.
std::vector<GpuReading> parse_nvidia_smi_gpus(const std::string& csv);
// `amd-smi metric --usage --mem-usage --power --temperature --json`: a JSON array of one object a
// GPU (ROCm 6), or the same array under "gpu_data" (ROCm 7). Temperature: the hotspot (junction)
// sensor, the edge sensor where there is none (MI300X reports no edge temperature).
std::vector<GpuReading> parse_amd_smi_metric(const std::string& json);
// `amd-smi static --partition --json`: fills in the partition modes of the GPUs in `gpus`.
void add_amd_smi_partitions(const std::string& json, std::vector<GpuReading>& gpus);
// `rocm-smi --showuse --showmeminfo vram --showpower --showtemp --showcomputepartition
// --showmemorypartition --json`: {"card0": {...}, ..., "system": {...}}.
std::vector<GpuReading> parse_rocm_smi_json(const std::string& json);

}  // namespace ddpx::serve
