#include "launch/options.h"

#include <string>

#include "core/error.h"

namespace ddpx::launch {

Tee parse_tee(const std::string& value) {
  if (value == "0" || value == "rank0") return Tee::kFirst;
  if (value == "all") return Tee::kAll;
  if (value == "none") return Tee::kNone;
  fail(ErrorKind::kUsage, "--tee {}: unknown value; use 0 (rank 0 only), all or none", value);
}

int parse_nnodes(const std::string& value) {
  if (value == "auto") return 0;
  size_t used = 0;
  int n = -1;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
  }
  DDPX_CHECK(used == value.size() && n >= 1, ErrorKind::kUsage,
             "--nnodes {}: expected a node count (at least 1) or auto", value);
  return n;
}

void validate(const LaunchOptions& o) {
  constexpr int kMaxWorkers = 4096;  // a typo guard, far above any node's core count
  DDPX_CHECK(o.nproc_per_node >= 1 && o.nproc_per_node <= kMaxWorkers, ErrorKind::kUsage,
             "ddpx run {}: the number of workers must be between 1 and {}", o.nproc_per_node,
             kMaxWorkers);
  DDPX_CHECK(o.nnodes >= 0, ErrorKind::kUsage,
             "--nnodes {}: must be at least 1 (or auto: as many as join)", o.nnodes);
  const std::string nodes = o.nnodes == 0 ? "auto" : std::to_string(o.nnodes);
  if (o.node_rank >= 0) {
    DDPX_CHECK(o.nnodes > 0, ErrorKind::kUsage,
               "--node_rank {} with --nnodes auto: give the node count, or leave --node_rank "
               "out to have ranks assigned at rendezvous",
               o.node_rank);
    DDPX_CHECK(o.node_rank < o.nnodes, ErrorKind::kUsage,
               "--node_rank {}: must be in [0, --nnodes {})", o.node_rank, o.nnodes);
  }
  DDPX_CHECK(o.node_rank >= -1, ErrorKind::kUsage,
             "--node_rank {}: must be in [0, --nnodes {}), or left out", o.node_rank, nodes);
  DDPX_CHECK(o.master_port >= 0 && o.master_port <= 65535, ErrorKind::kUsage,
             "--master_port {}: must be a TCP port in [1, 65535]", o.master_port);
  if (o.nnodes != 1) {
    DDPX_CHECK(!o.master_addr.empty(), ErrorKind::kUsage,
               "--nnodes {} needs --master_addr: the address of node 0, reachable from every "
               "node",
               nodes);
    DDPX_CHECK(o.master_port != 0, ErrorKind::kUsage,
               "--nnodes {} needs --master_port: the same free port on node 0 for every node "
               "(e.g. --master_port 29500)",
               nodes);
  }
  DDPX_CHECK(o.rdzv_timeout_s > 0, ErrorKind::kUsage, "--rdzv_timeout {}: must be above 0 s",
             o.rdzv_timeout_s);
  DDPX_CHECK(o.rdzv_last_call_s >= 0 && (o.nnodes != 0 || o.rdzv_last_call_s < o.rdzv_timeout_s),
             ErrorKind::kUsage, "--rdzv_last_call {}: must be in [0, --rdzv_timeout {})",
             o.rdzv_last_call_s, o.rdzv_timeout_s);
  DDPX_CHECK(o.grace_s >= 0 && o.grace_s <= 3600, ErrorKind::kUsage,
             "--grace_s {}: must be between 0 and 3600 seconds", o.grace_s);
  DDPX_CHECK(o.threads_per_worker >= 0, ErrorKind::kUsage,
             "--threads_per_worker {}: must be at least 1 (or 0 for cores / workers)",
             o.threads_per_worker);
  DDPX_CHECK(o.max_restarts >= 0, ErrorKind::kUsage, "--max_restarts {}: must be at least 0",
             o.max_restarts);
  DDPX_CHECK(o.job_name.find('/') == std::string::npos, ErrorKind::kUsage,
             "--job_name '{}': must not contain '/' (it names a folder under --log_dir)",
             o.job_name);
  DDPX_CHECK(!o.log_dir.empty(), ErrorKind::kUsage, "--log_dir: must not be empty");
  DDPX_CHECK(!o.command.empty(), ErrorKind::kUsage,
             "ddpx run: no program given; write it after `--`, e.g. "
             "`ddpx run 2 -- train --model resnet18` or `ddpx run 2 -- ./my_trainer`");
}

}  // namespace ddpx::launch
