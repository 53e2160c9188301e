#include "train/threads.h"

#include <dlfcn.h>
#include <sched.h>
#include <torch/utils.h>

#include <algorithm>

#include "core/env.h"

namespace ddpx {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(CPU_COUNT(&set), 1);
}

int default_threads() {
  return static_cast<int>(std::max<long>(env::get_int_or("DDPX_THREADS", usable_cores()), 1));
}

void set_threads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto openblas =
          reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    openblas(threads);
}

}  // namespace ddpx
