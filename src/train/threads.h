// How many intra-op threads a process should use by default: the launcher's share
// ($DDPX_THREADS = usable cores / workers), else every core this process may run on
// (sched_getaffinity, so taskset and cgroup cpusets are honoured).
#pragma once

namespace ddpx {

int usable_cores();
int default_threads();

// Sets torch's intra-op threads and, when libtorch runs on OpenBLAS, OpenBLAS's own thread
// pool too (it ignores torch's setting, so a 1-thread worker would otherwise still run a
// BLAS call on every core and oversubscribe the machine).
void set_threads(int threads);

}  // namespace ddpx
