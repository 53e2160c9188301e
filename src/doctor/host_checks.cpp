#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include "doctor/checks.h"
#include "launch/host.h"
#include "launch/job_record.h"

extern char** environ;

namespace ddpx::doctor {
namespace {

namespace fs = std::filesystem;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Below this /dev/shm cannot hold the shared-memory transport's gradient arenas and the loader's
// batches for a mid-sized model; Docker's default is 64 MiB.
constexpr double kMinShmGiB = 1.0;

int count_numa_nodes() {
  int nodes = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/node", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(name[4])) ++nodes;
  }
  return nodes;
}

}  // namespace

void check_host(Report& r) {
  int usable = launch::usable_cpu_count();
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  r.add("cpu", "cores", fmt::format("{} usable of {} online", usable, online),
        usable < 2 ? Verdict::kWarn : Verdict::kOk,
        "one core: workers share it; give the job more cores (taskset, cgroup, --cpus)");
  int numa = count_numa_nodes();
  r.add("cpu", "NUMA nodes",
        numa > 0 ? std::to_string(numa) : "unknown (no /sys/devices/system/node)");

  struct statvfs shm {};
  if (::statvfs("/dev/shm", &shm) == 0) {
    double total = static_cast<double>(shm.f_blocks) * shm.f_frsize / kGiB;
    double free = static_cast<double>(shm.f_bavail) * shm.f_frsize / kGiB;
    r.add("memory", "/dev/shm", fmt::format("{:.1f} GiB, {:.1f} GiB free", total, free),
          total < kMinShmGiB ? Verdict::kWarn : Verdict::kOk,
          "too small for the shared-memory transport and the data loader; in a container run "
          "with --ipc=host or --shm-size 16g");
  } else {
    r.add("memory", "/dev/shm", "missing", Verdict::kWarn,
          "mount a tmpfs at /dev/shm; ddpx falls back to Gloo over loopback (--transport gloo)");
  }
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  r.add("memory", "RAM", fmt::format("{:.1f} GiB", static_cast<double>(pages) * page / kGiB));

  // Variables that change how ranks find each other and which devices they see.
  std::vector<std::string> set;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    for (const char* prefix : {"NCCL_", "RCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE",
                               "ROCR_VISIBLE", "MASTER_", "TORCH_NCCL_", "OMP_NUM_THREADS"}) {
      if (kv.rfind(prefix, 0) == 0) set.push_back(kv);
    }
  }
  std::sort(set.begin(), set.end());
  r.add("env", "variables",
        set.empty() ? "none of NCCL_*, GLOO_*, *_VISIBLE_DEVICES, MASTER_*"
                    : fmt::format("{}", fmt::join(set, " ")));
}

void check_jobs_and_data(Report& r) {
  std::vector<launch::JobRecord> live = launch::live_jobs(launch::jobs_dir(/*for_writing=*/false));
  std::vector<std::string> held;
  for (const auto& job : live) {
    held.push_back(fmt::format("{} ({}, {}, port {}{})", job.id, job.user, job.kind, job.port,
                               job.devices.empty()
                                   ? std::string()
                                   : fmt::format(", GPU {}", fmt::join(job.devices, ","))));
  }
  r.add("jobs", "reservations",
        held.empty() ? "no other ddpx job on this host"
                     : fmt::format("{} job(s): {}", held.size(), fmt::join(held, "; ")),
        Verdict::kOk);
  bool fashion = fs::is_directory("/usr/share/datasets/fashion-mnist");
  r.add("data", "fashion-mnist",
        fashion ? "/usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)"
                : "not installed",
        fashion ? Verdict::kOk : Verdict::kWarn,
        "apt-get install dataset-fashion-mnist, or `ddpx data download fashion-mnist`");
}

Report run_doctor() {
  Report report;
  check_build(report);
  check_gpus(report);
  check_host(report);
  check_jobs_and_data(report);
  return report;
}

}  // namespace ddpx::doctor
