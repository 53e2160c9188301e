#include "core/malloc_tuning.h"

#include <malloc.h>

#include "core/env.h"

namespace ddpx {

bool tune_malloc() {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (env::get(name)) return false;
  if (env::get_or("DDPX_MALLOC", "tuned") == "system") return false;
  // Setting the mmap threshold also stops glibc from adjusting both thresholds itself.
  return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, 128 << 20) == 1;
#else
  return false;
#endif
}

bool share_one_malloc_arena() {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_ARENA_MAX", "GLIBC_TUNABLES"})
    if (env::get(name)) return false;
  if (env::get_or("DDPX_MALLOC", "tuned") == "system") return false;
  return ::mallopt(M_ARENA_MAX, 1) == 1;
#else
  return false;
#endif
}

}  // namespace ddpx
