#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"
#include "distributed/device.h"
#include "distributed/gpu_library.h"
#include "doctor/checks.h"
#include "doctor/gpu_tools.h"
#include "launch/host.h"

namespace ddpx::doctor {
namespace {

// The seed's MI300X set-up: one memory partition per socket and one compute partition per GPU.
constexpr const char* kMemoryPartition = "NPS1";
constexpr const char* kComputePartition = "SPX";
// A GPU with more than this much memory in use, or this busy, is used by someone else.
constexpr double kBusyShare = 0.10;
constexpr double kBusyUtilizationPct = 10.0;

std::string build_kind() {
  std::string cuda = DDPX_BUILD_TORCH_CUDA, hip = DDPX_BUILD_TORCH_HIP;
  return !hip.empty() ? "rocm" : !cuda.empty() ? "cuda" : "cpu";
}

// Tools list GPUs that libtorch cannot use: say why and what to do.
void check_runtime_sees(Report& r, const char* tool, size_t listed, const char* vendor) {
  int seen = dist::visible_gpus();
  if (listed == 0 || seen > 0) return;
  std::string kind = build_kind();
  std::string fix =
      kind == "cpu" ? "this libtorch is a CPU build; install PyTorch's GPU wheel and rebuild ddpx"
      : (kind == "cuda") != (std::string(vendor) == "nvidia")
          ? fmt::format("libtorch is built for {} but the GPUs are {}; install the matching wheel",
                        kind, vendor)
          : "the driver is older than the runtime libtorch needs, or *_VISIBLE_DEVICES hides them";
  r.add("gpu", "runtime", fmt::format("{} lists {} GPU(s) but libtorch sees none", tool, listed),
        Verdict::kFail, fix);
}

// Which NUMA node each GPU hangs off, as the tool printed it.
void add_numa(Report& r, const Topology& t, const char* tool) {
  if (!t.numa_node.empty()) r.add("gpu", "NUMA", fmt::format("{} ({})", t.numa_summary(), tool));
}

void check_nvidia(Report& r) {
  auto table = run_tool("nvidia-smi", {});
  if (!table) return;
  NvidiaSmi smi = parse_nvidia_smi(*table);
  if (smi.gpus.empty()) return;
  r.add("gpu", "driver",
        fmt::format("NVIDIA {} (CUDA {} or older runtimes)", smi.driver, smi.cuda));
  std::map<std::string, int> processes;
  for (const GpuProcess& p : smi.processes) ++processes[p.gpu];
  for (const GpuRow& g : smi.gpus) {
    bool busy = (g.memory_total_mib > 0 && g.memory_used_mib > kBusyShare * g.memory_total_mib) ||
                g.utilization_pct > kBusyUtilizationPct || processes[g.index] > 0;
    r.add("gpu", "GPU " + g.index,
          fmt::format("{}, {:.0f}/{:.0f} MiB used, {:.0f}% busy, {} process(es)", g.name,
                      g.memory_used_mib, g.memory_total_mib, g.utilization_pct, processes[g.index]),
          busy ? Verdict::kWarn : Verdict::kOk,
          "in use by another process (nvidia-smi shows it); pick other GPUs with --gpus or wait");
  }
  if (auto topo = run_tool("nvidia-smi", {"topo", "-m"})) {
    Topology t = parse_nvidia_topology(*topo);
    if (t.gpus.size() >= 2) {
      r.add("gpu", "topology", t.summary(), t.all_nvlink() ? Verdict::kOk : Verdict::kWarn,
            "some GPU pairs talk over PCIe or across sockets: all-reduce is slower there; keep a "
            "job's GPUs on one NVLink island (--gpus)");
    }
    add_numa(r, t, "nvidia-smi topo -m");
  }
  check_runtime_sees(r, "nvidia-smi", smi.gpus.size(), "nvidia");
}

void check_partitions(Report& r, const std::vector<GpuRow>& rows, const char* tool) {
  for (const GpuRow& g : rows) {
    if (g.memory_partition.empty() && g.compute_partition.empty()) continue;
    bool ok = g.memory_partition == kMemoryPartition && g.compute_partition == kComputePartition;
    r.add("gpu", "GPU " + g.index + " partition",
          fmt::format("{}, {} ({})", g.memory_partition, g.compute_partition, tool),
          ok ? Verdict::kOk : Verdict::kFail,
          fmt::format("MI300X training as set up by the seed needs {} and {}: sudo amd-smi set "
                      "--gpu all --memory-partition {} and --compute-partition {}",
                      kMemoryPartition, kComputePartition, kMemoryPartition, kComputePartition));
  }
}

void check_amd(Report& r) {
  size_t listed = 0;
  if (auto table = run_tool("rocm-smi", {})) {
    std::vector<GpuRow> rows = parse_rocm_smi(*table);
    for (const GpuRow& g : rows) {
      bool busy = g.utilization_pct > kBusyUtilizationPct;
      r.add("gpu", "GPU " + g.index,
            fmt::format("{}, {:.0f}% busy (rocm-smi)", g.name.empty() ? "AMD GPU" : g.name,
                        g.utilization_pct),
            busy ? Verdict::kWarn : Verdict::kOk,
            "in use by another process (rocm-smi --showpids); pick other GPUs or wait");
    }
    check_partitions(r, rows, "rocm-smi");
    listed = rows.size();
    if (auto numa = run_tool("rocm-smi", {"--showtoponuma"})) {
      add_numa(r, parse_rocm_smi_numa(*numa), "rocm-smi --showtoponuma");
    }
  }
  if (auto text = run_tool("amd-smi", {"static", "--partition"})) {
    std::vector<GpuRow> rows = parse_amd_smi_partitions(*text);
    if (listed == 0) check_partitions(r, rows, "amd-smi");
    listed = std::max(listed, rows.size());
  }
  check_runtime_sees(r, listed ? "rocm-smi/amd-smi" : "", listed, "amd");
}

}  // namespace

void check_gpus(Report& r) {
  // The GPU library loaded whatever the machine: the doctor checks that it links; a training run
  // loads it only where a GPU driver is (distributed/gpu_library.h).
  const std::string status = dist::gpu_library_status();
  const dist::gpu::Api* gpu = nullptr;
  try {
    gpu = dist::load_gpu_api();
  } catch (const Error& e) {
    r.add("gpu", "library", e.what(), Verdict::kFail,
          "rebuild ddpx (it builds libddpx-gpu.so beside ddpx-torch), or reinstall it");
  }
  size_t before = r.findings.size();
  check_nvidia(r);
  check_amd(r);
  const bool tools_listed = r.findings.size() > before;
  int seen = dist::visible_gpus();
#ifdef DDPX_WITH_CUDA
  if (gpu != nullptr) {
    const bool no_driver = status.rfind("not loaded: no GPU driver", 0) == 0;
    r.add("gpu", "library",
          dist::gpu_library_status() +
              (no_driver ? " for this check (a run loads it only where a GPU driver is installed, "
                           "and none is here)"
                         : ""));
    // libtorch's CUDA hooks answer once the library is in (before it, the CPU-only stubs throw).
    try {
      const int v = at::detail::getCUDAHooks().versionCUDART();
      r.add("gpu", "runtime",
            fmt::format("CUDA {}.{} (libtorch's runtime)", v / 1000, v % 1000 / 10));
    } catch (const std::exception& e) {
      const std::string what = e.what();
      r.add("gpu", "runtime",
            fmt::format("libtorch's CUDA hooks are not registered ({})",
                        what.substr(0, what.find('\n'))),
            Verdict::kFail, "rebuild ddpx; report the line above if it stays");
    }
    for (int i = 0; i < seen; ++i) {
      const dist::gpu::Properties p = gpu->properties(i);
      r.add("gpu", fmt::format("device {}", i),
            fmt::format("{} ({:.0f} GiB) as libtorch sees it", p.name,
                        static_cast<double>(p.total_memory) / (1 << 30)));
    }
    std::string comm = build_kind() == "rocm" ? "RCCL" : "NCCL";
    r.add("nccl", comm,
          seen > 0 ? comm + " " + gpu->nccl_version()
                   : comm + " " + gpu->nccl_version() + " (no GPU to use it)");
  }
#else
  r.add("nccl", "NCCL", "not compiled in: Gloo and ddpx's shared-memory transport only");
#endif
  if (!tools_listed && seen == 0 && launch::detect_gpus().ids.empty()) {
    r.add("gpu", "devices", "none found (no nvidia-smi, rocm-smi, amd-smi, /dev/nvidia*, /dev/kfd)",
          Verdict::kWarn, "training runs on the CPU; for GPUs run where the driver is installed");
  }
}

}  // namespace ddpx::doctor
