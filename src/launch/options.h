// The launcher's options (`ddpx run N [options] -- PROGRAM ARGS...`) as a plain struct with
// the defaults `--help` shows. validate() checks them once, before anything is started, and
// throws a kUsage ddpx::Error naming the flag.
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

// Which workers' output the launcher's console shows (every worker always has a log file).
enum class Tee {
  kFirst,  // local rank 0 of this node (global rank 0 on the master node), unprefixed
  kAll,    // every worker, each line prefixed "[rank K] "
  kNone,   // nothing but the launcher's own lines
};

Tee parse_tee(const std::string& value);     // "0", "rank0", "all", "none"
int parse_nnodes(const std::string& value);  // "auto" (0) or a count

struct LaunchOptions {
  int nproc_per_node = 1;  // N: workers on this node
  int nnodes = 1;          // 0 (--nnodes auto): as many nodes as join the rendezvous, at least 2
  int node_rank = -1;  // -1: 0 on one node; on several, assigned at rendezvous (node_rendezvous.h)
  double rdzv_timeout_s = 600;   // for every node to join when node ranks are assigned
  double rdzv_last_call_s = 10;  // --nnodes auto: the job forms after this long with no join
  std::string master_addr;       // empty: 127.0.0.1 on one node; required on several
  int master_port = 0;           // 0: the launcher picks a free one (one node only)
  std::string log_dir = "log";
  std::string job_name;  // empty: a short random id
  Tee tee = Tee::kFirst;
  double grace_s = 5.0;        // SIGTERM -> SIGKILL delay when stopping workers
  int threads_per_worker = 0;  // 0: usable cores / N, at least 1
  std::string gpus;            // empty: the first N visible GPUs; "none"; or "0,1"
  int max_restarts = 0;
  bool dry_run = false;              // print each worker's environment and command, start nothing
  std::vector<std::string> command;  // PROGRAM ARGS... (the words after `--`)
  std::vector<std::string> self_subcommands;  // PROGRAM words that mean "this ddpx binary"
};

void validate(const LaunchOptions& options);

}  // namespace ddpx::launch
