#include "core/proc_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"

namespace ddpx {
namespace {

// "Field:   1234 kB" -> MiB; -1 when absent.
double field_mib(const char* file, const std::string& field) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  }
  return -1;
}

}  // namespace

double proc_status_mib(const std::string& field) {
  double mib = field_mib("/proc/self/status", field);
  DDPX_CHECK(mib >= 0, ErrorKind::kIo,
             "/proc/self/status has no {} line; memory figures need Linux", field);
  return mib;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

double available_memory_mib() { return std::max(field_mib("/proc/meminfo", "MemAvailable"), 0.0); }

}  // namespace ddpx
