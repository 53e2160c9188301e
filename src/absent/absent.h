// Stand-ins for what a -DDDPX_GPU_CHECK=ON build leaves out (cmake/dependencies.cmake): the job
// service (SQLite, cpp-httplib, OpenSSL), `ddpx data download` (libcurl) and unpacking CIFAR's
// tar.gz archives (libarchive). Each throws one line naming what was asked for and what to do.
#pragma once

#include "core/error.h"

namespace ddpx::absent {

// `what` is not in this build: a usage error naming the build option and the way out (`instead`).
[[noreturn]] inline void not_built(const char* what, const char* instead) {
  fail(ErrorKind::kUsage,
       "{} is not in this build (configured with -DDDPX_GPU_CHECK=ON, which leaves out the "
       "libraries it needs); {}",
       what, instead);
}

}  // namespace ddpx::absent
