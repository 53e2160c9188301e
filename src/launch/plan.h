// The job plan: for every worker on this node, its ranks, the program to exec and the
// environment contract it gets. Pure (no processes started), so it is what `--dry_run` prints
// and what tests check without spawning anything.
//
// The contract, per worker:
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (the node rank),
//   MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS and DDPX_THREADS (intra-op threads),
//   DDPX_RESTART_COUNT, and CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES when there are GPUs
//   (with DDPX_SHARED_GPUS=1 on every worker when --gpus gives one GPU to several).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launch/host.h"
#include "launch/options.h"

namespace ddpx::launch {

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::string path;                                      // what execv runs
  std::vector<std::string> argv;                         // argv[0] included
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the launcher's
  // `ddpx train`: SIGUSR1/SIGUSR2 (snapshot requests) are blocked from the fork until it
  // installs its handlers, so an early request is held, not fatal (the signals' default action).
  bool holds_snapshot_signals_at_start = false;
};

struct JobPlan {
  std::string master_addr;
  int master_port = 0;
  int world_size = 0;
  int threads_per_worker = 0;
  std::vector<std::string> gpu_ids;  // the distinct GPUs this node's workers use, in order
  std::vector<WorkerSpec> workers;   // this node's, by local rank
};

struct HostInfo {
  int cpu_count = 1;
  // OMP_NUM_THREADS of the launcher's own environment (0: unset or not a count): the workers'
  // threads when --threads_per_worker does not say, as torchrun keeps a value the user set.
  int inherited_threads = 0;
  GpuInfo gpus;
  std::string self_exe;  // the ddpx binary, run for PROGRAM words in self_subcommands
};

HostInfo probe_host();

// Throws kUsage for a program that cannot be run or a GPU request that cannot be met.
JobPlan make_plan(const LaunchOptions& options, const HostInfo& host, int master_port);

// One line when this node's workers would run more threads than `host` has usable cores and
// no GPU takes the work (every step then waits while the workers take turns on the cores),
// saying how to change it; empty otherwise. `ddpx run` prints it before the workers start.
std::string oversubscription_note(const JobPlan& plan, const HostInfo& host);

// Sets DDPX_RESTART_COUNT for a restarted job.
void set_restart_count(JobPlan& plan, int restart_count);

// Single-node jobs meet through a file store (DDPX_STORE_FILE) rather than a TCPStore, whose
// server listens on every interface: nothing of a local job is reachable
// from the network. One fresh file per attempt, so a restart never sees stale keys.
void set_store_file(JobPlan& plan, const std::string& path);

// Every worker records its collectives in DDPX_TRACE_DIR=dir (one file per rank, see
// trace/collective_trace.h) and leaves the timeout table to the launcher (DDPX_TRACE_TABLE=0).
// One folder per attempt, like the store file.
void set_trace_dir(JobPlan& plan, const std::string& dir);

// Sets (or replaces) one variable in every worker's environment.
void set_env(JobPlan& plan, const std::string& name, const std::string& value);

// `s` as one word for /bin/sh: as is when it is plain, else in single quotes.
std::string shell_quote(const std::string& s);

// One shell-quoted line per worker: `[rank K] VAR=value ... program args`.
std::string describe(const JobPlan& plan);

}  // namespace ddpx::launch
