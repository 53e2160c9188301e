// Node ranks assigned at rendezvous, for the identical command on every node (`ddpx run 8
// --nnodes 2 --master_addr A --master_port P -- ...` with no --node_rank, or run-ddp.sh's
// `8 auto A script_multi_node`), as torchrun's c10d rendezvous assigns them.
//
// The launcher on the host that owns --master_addr (the one that can bind A:P) holds the
// rendezvous there and is node 0, since its worker of global rank 0 hosts the job's TCPStore at
// A:P. Every other launcher connects (retrying until --rdzv_timeout) and is given the next node
// rank in join order. With --nnodes K the job forms when K nodes have joined; with --nnodes auto
// when at least two have and none joined for --rdzv_last_call seconds. Then node 0 closes the
// rendezvous and its workers' TCPStore binds the same port. Ranks are decided once per launch:
// a restart (--max_restarts) keeps them.
//
// Protocol, one line each way: "ddpx-node-rendezvous 1 nnodes=K nproc=N host=H" (K is 0 for
// auto), answered "rank R nnodes K" or "error MESSAGE". Nodes that disagree on --nnodes or on the
// workers per node, and nodes past K, are refused with a line naming both values. Launcher only:
// no libtorch (the launcher is torch-free).
#pragma once

#include <string>

namespace ddpx::launch {

struct NodeRendezvousOptions {
  std::string master_addr;
  int master_port = 0;
  int nnodes = 0;  // 0: as many as join (at least 2)
  int nproc_per_node = 1;
  double timeout_s = 600;   // for all nodes to join (torchrun's join timeout)
  double last_call_s = 10;  // --nnodes auto: the quiet time after the last join
};

struct NodeAssignment {
  int node_rank = 0;
  int nnodes = 1;
};

// Joins the rendezvous (holding it when this host owns master_addr and can bind the port) and
// returns this node's rank and the job's node count. Throws a kUsage ddpx::Error naming the
// disagreeing values, or kDist when the nodes did not all join in time.
NodeAssignment join_node_rendezvous(const NodeRendezvousOptions& options);

}  // namespace ddpx::launch
