// This process's memory as Linux reports it (/proc/self/status, /proc/meminfo), for the memory
// benchmark and the batch-size finder. Torch-free.
#pragma once

#include <string>

namespace ddpx {

// A field of /proc/self/status in MiB ("VmRSS", "VmHWM": the peak resident set); throws kIo
// when the field is missing (not Linux).
double proc_status_mib(const std::string& field);

// Resets VmHWM to the current resident set (writes "5" to /proc/self/clear_refs); false when
// the kernel refuses, and then VmHWM keeps the peak of the whole process.
bool reset_peak_rss();

// MemAvailable of /proc/meminfo in MiB (0 when unknown).
double available_memory_mib();

}  // namespace ddpx
