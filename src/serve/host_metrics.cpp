#include "serve/host_metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "serve/store.h"

namespace ddpx::serve {
namespace {

struct CpuTimes {
  unsigned long long busy = 0, total = 0;
};

CpuTimes read_cpu() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  CpuTimes t;
  t.busy = user + nice + system + irq + softirq + steal;
  t.total = t.busy + idle + iowait;
  return t;
}

}  // namespace

HostReading read_host() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kMinInterval = std::chrono::milliseconds(100);  // 10 of the kernel's ticks
  static std::mutex mutex;
  static CpuTimes last = read_cpu();
  static Clock::time_point last_at = Clock::now();
  static double last_pct = -1;  // none yet
  HostReading h;
  {
    std::lock_guard<std::mutex> lock(mutex);
    // CPU use is the difference of two readings. One taken too soon after the last says
    // nothing: the figure of the last one stands; the very first request waits for enough time
    // to pass instead of reporting 0%.
    auto age = Clock::now() - last_at;
    if (age < kMinInterval && last_pct >= 0) {
      h.cpu_pct = last_pct;
    } else {
      if (age < kMinInterval) std::this_thread::sleep_for(kMinInterval - age);
      CpuTimes now = read_cpu();
      unsigned long long total = now.total - last.total, busy = now.busy - last.busy;
      h.cpu_pct = total > 0 ? 100.0 * static_cast<double>(busy) / static_cast<double>(total)
                            : std::max(last_pct, 0.0);
      if (total > 0) {
        last = now;
        last_at = Clock::now();
        last_pct = h.cpu_pct;
      }
    }
  }
  std::ifstream in("/proc/meminfo");
  std::map<std::string, double> kib;
  std::string key;
  double value;
  std::string unit;
  while (in >> key >> value >> unit) kib[key] = value;
  h.memory_total_gib = kib["MemTotal:"] / (1024.0 * 1024.0);
  h.memory_used_gib = (kib["MemTotal:"] - kib["MemAvailable:"]) / (1024.0 * 1024.0);
  h.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  h.gpus = read_gpus();
  return h;
}

nlohmann::json host_json(const HostReading& h) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuReading& g : h.gpus) {
    gpus.push_back({{"index", g.index},
                    {"utilization_pct", g.utilization_pct},
                    {"memory_used_mib", g.memory_used_mib},
                    {"memory_total_mib", g.memory_total_mib},
                    {"temperature_c", g.temperature_c},
                    {"power_w", g.power_w},
                    {"vendor", g.vendor},
                    {"compute_partition", g.compute_partition},
                    {"memory_partition", g.memory_partition}});
  }
  return {{"cpu_pct", h.cpu_pct},
          {"cores", h.cores},
          {"memory_used_gib", h.memory_used_gib},
          {"memory_total_gib", h.memory_total_gib},
          {"gpus", gpus}};
}

std::string prometheus_text(Store& store, int total_slots) {
  std::map<std::string, int> by_state = {
      {"queued", 0}, {"running", 0}, {"stopping", 0}, {"ended", 0}};
  int used = 0;
  for (const Job& j : store.jobs("")) {
    ++by_state[job_state_name(j.state)];
    if (j.state == JobState::kRunning || j.state == JobState::kStopping)
      used += static_cast<int>(j.slots.size());
  }
  HostReading h = read_host();
  std::string out;
  out += "# HELP ddpx_jobs Jobs known to the service, by state.\n# TYPE ddpx_jobs gauge\n";
  for (const auto& [state, n] : by_state)
    out += fmt::format("ddpx_jobs{{state=\"{}\"}} {}\n", state, n);
  out += "# HELP ddpx_slots Device slots of this host.\n# TYPE ddpx_slots gauge\n";
  out += fmt::format("ddpx_slots{{kind=\"total\"}} {}\nddpx_slots{{kind=\"used\"}} {}\n",
                     total_slots, used);
  out += "# HELP ddpx_host_cpu_percent CPU use of the host since the previous reading.\n";
  out +=
      fmt::format("# TYPE ddpx_host_cpu_percent gauge\nddpx_host_cpu_percent {:.1f}\n", h.cpu_pct);
  out += "# HELP ddpx_host_memory_bytes Host memory.\n# TYPE ddpx_host_memory_bytes gauge\n";
  out += fmt::format("ddpx_host_memory_bytes{{kind=\"used\"}} {:.0f}\n",
                     h.memory_used_gib * (1 << 30));
  out += fmt::format("ddpx_host_memory_bytes{{kind=\"total\"}} {:.0f}\n",
                     h.memory_total_gib * (1 << 30));
  if (!h.gpus.empty()) {
    out +=
        "# HELP ddpx_gpu_utilization_percent GPU utilization.\n# TYPE ddpx_gpu_utilization_percent "
        "gauge\n";
    for (const GpuReading& g : h.gpus)
      out += fmt::format("ddpx_gpu_utilization_percent{{gpu=\"{}\"}} {}\n", g.index,
                         g.utilization_pct);
    out +=
        "# HELP ddpx_gpu_memory_used_mib GPU memory in use.\n# TYPE ddpx_gpu_memory_used_mib "
        "gauge\n";
    for (const GpuReading& g : h.gpus)
      out += fmt::format("ddpx_gpu_memory_used_mib{{gpu=\"{}\"}} {}\n", g.index, g.memory_used_mib);
    out +=
        "# HELP ddpx_gpu_temperature_celsius GPU temperature.\n# TYPE ddpx_gpu_temperature_celsius "
        "gauge\n";
    for (const GpuReading& g : h.gpus)
      out +=
          fmt::format("ddpx_gpu_temperature_celsius{{gpu=\"{}\"}} {}\n", g.index, g.temperature_c);
    out += "# HELP ddpx_gpu_power_watts GPU power draw.\n# TYPE ddpx_gpu_power_watts gauge\n";
    for (const GpuReading& g : h.gpus)
      out += fmt::format("ddpx_gpu_power_watts{{gpu=\"{}\"}} {}\n", g.index, g.power_w);
  }
  return out;
}

}  // namespace ddpx::serve
