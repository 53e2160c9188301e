// The GPU vendors' command-line tools, run and read: nvidia-smi (devices, processes, topology)
// and rocm-smi / amd-smi (devices, and the MI300X partition modes the seed requires: NPS1
// memory and SPX compute). The parsers take the tools' text as published (the tests feed them
// recorded outputs from real machines, tests/fixtures/doctor/), so they are pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddpx::doctor {

struct GpuRow {
  std::string index;
  std::string name;
  double memory_total_mib = -1;  // -1: not reported
  double memory_used_mib = -1;
  double utilization_pct = -1;
  std::string driver;
  std::string memory_partition;   // AMD: NPS1, NPS4, ...
  std::string compute_partition;  // AMD: SPX, DPX, QPX, CPX
};

struct GpuProcess {
  std::string gpu;  // index or uuid as the tool prints it
  std::string pid;
  std::string name;
  std::string memory;
};

// The default `nvidia-smi` table: driver and CUDA versions from its title, one row per GPU
// (name, memory used/total, utilization) and the Processes section.
struct NvidiaSmi {
  std::string driver;
  std::string cuda;
  std::vector<GpuRow> gpus;
  std::vector<GpuProcess> processes;
};
NvidiaSmi parse_nvidia_smi(const std::string& table);

// The GPUs' topology: the link kind between each pair of GPUs ("NV18", "PIX", "SYS", ...) and
// the NUMA node each GPU hangs off (a rank whose CPU memory is on another node crosses sockets
// on every host copy).
struct Topology {
  std::vector<std::string> gpus;                     // GPU0, GPU1, ...
  std::map<std::pair<int, int>, std::string> links;  // (i, j) with i < j
  std::map<int, std::string> numa_node;              // GPU index -> node as printed ("0", "N/A")
  std::string summary() const;                       // "8 GPUs; GPU pairs by link: NV18 x28"
  bool all_nvlink() const;
  std::string numa_summary() const;  // "GPU 0-3 on NUMA node 0, GPU 4-7 on NUMA node 1"
};
// `nvidia-smi topo -m`: the links, and the NUMA nodes from its "NUMA Affinity" column.
Topology parse_nvidia_topology(const std::string& matrix);
// `rocm-smi --showtoponuma`: the NUMA nodes ("GPU[0] : (Topology) Numa Node: 0"); no links.
Topology parse_rocm_smi_numa(const std::string& text);

// `rocm-smi` (the concise table): one row per GPU with partitions, VRAM% and GPU%.
std::vector<GpuRow> parse_rocm_smi(const std::string& table);

// `amd-smi static` / `amd-smi partition` text: per GPU, the compute and memory partition.
std::vector<GpuRow> parse_amd_smi_partitions(const std::string& text);

// Runs `program args` when program is on PATH and returns its stdout (stderr is dropped; a
// tool still running after 30 s is killed); nullopt when it is not on PATH, or fails silently.
std::optional<std::string> run_tool(const std::string& program,
                                    const std::vector<std::string>& args);

}  // namespace ddpx::doctor
