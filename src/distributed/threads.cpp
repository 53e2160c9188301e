#include "distributed/threads.h"

#include <dlfcn.h>
#include <sched.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "distributed/world.h"

namespace ddpx::dist {
namespace {

// A thread count from the environment. OMP_NUM_THREADS may be an OpenMP list ("4,2": 4 at the
// outer level), of which the first number counts here.
std::optional<int> threads_from(const char* name) {
  auto value = env::get(name);
  if (!value) return std::nullopt;
  const std::string first = value->substr(0, value->find(','));
  char* end = nullptr;
  long n = std::strtol(first.c_str(), &end, 10);
  DDPX_CHECK(!first.empty() && end != nullptr && *end == '\0' && n >= 1, ErrorKind::kUsage,
             "environment variable {}='{}' is not a thread count; give a whole number >= 1 or "
             "unset it",
             name, *value);
  return static_cast<int>(std::min<long>(n, 1 << 16));
}

// The ranks on this host; 1 when the environment says nothing (or something init() will
// reject with its own message).
int local_ranks() {
  try {
    return std::max(detect_world().local_world_size, 1);
  } catch (const std::exception&) {
    return 1;
  }
}

std::pair<int, std::string> choose() {
  for (const char* name : {"DDPX_THREADS", "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"}) {
    if (auto n = threads_from(name)) return {*n, name};
  }
  return {cores_per_local_rank(), "cores / local ranks"};
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(CPU_COUNT(&set), 1);
}

int cores_per_local_rank() { return std::max(usable_cores() / local_ranks(), 1); }

int default_threads() { return choose().first; }

std::string default_threads_source() { return choose().second; }

void set_threads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto openblas =
          reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    openblas(threads);
}

}  // namespace ddpx::dist
