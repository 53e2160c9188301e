// How many intra-op threads a process uses when --threads does not say, however it was started:
// $DDPX_THREADS (`ddpx run` sets it to its --threads_per_worker), else $OMP_NUM_THREADS (torchrun
// sets 1; users and batch scripts set it), else $SLURM_CPUS_PER_TASK (srun --cpus-per-task),
// else the cores this process may run on (sched_getaffinity, so taskset and cgroup cpusets are
// honoured) shared among the ranks on this host (LOCAL_WORLD_SIZE or Slurm's tasks per node),
// at least 1. Without the share, N ranks started by torchrun or srun each took every core, and
// the host ran N times more threads than it has cores.
#pragma once

#include <string>

namespace ddpx::dist {

int usable_cores();
// usable_cores() shared among the ranks on this host, at least 1 (the share default_threads()
// falls back to).
int cores_per_local_rank();
int default_threads();
// Where default_threads() took its count from: "DDPX_THREADS", "OMP_NUM_THREADS",
// "SLURM_CPUS_PER_TASK" or "cores / local ranks".
std::string default_threads_source();

// Sets torch's intra-op threads and, when libtorch runs on OpenBLAS, OpenBLAS's own thread
// pool too (it ignores torch's setting, so a 1-thread worker would otherwise still run a
// BLAS call on every core and oversubscribe the machine).
void set_threads(int threads);

}  // namespace ddpx::dist
