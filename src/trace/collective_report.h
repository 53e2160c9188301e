// What a collective timeout prints: one table of every rank's last collectives (read from the
// rings of collective_trace.h) and a one-line verdict saying which rank is behind and on which
// operation, or which collectives do not match:
//
//   rank 1 is behind: last completed seq 41 (allreduce float[1000]), others wait in seq 42
//   (allreduce float[2000])
//   mismatched collectives at seq 3: rank 0 allreduce float[1024], rank 1 broadcast float[10]
//
// Pure functions of the snapshots plus a look at /proc for each rank's process state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/collective_trace.h"

namespace ddpx::trace {

struct Report {
  std::string table;    // several lines, each ending in '\n'
  std::string verdict;  // one line, no '\n'
};

// `ranks`: the snapshots found (any order); `world_size`: how many ranks the job has (ranks
// without a snapshot are named as such); `now_ns`: CLOCK_REALTIME "now"; `rows_per_rank`: how
// many of each rank's newest records the table shows; `this_node_only`: the job spans nodes, so
// the records of other nodes' ranks are only those they sent (rank<K>.remote), and when every
// record here waits the verdict points at the other nodes.
Report make_report(std::vector<Snapshot> ranks, int world_size, int64_t now_ns,
                   int rows_per_rank = 3, bool this_node_only = false);

// The verdict alone (make_report's second half).
std::string verdict(const std::vector<Snapshot>& ranks, int world_size,
                    bool this_node_only = false);

// "running", "stopped" (SIGSTOP or a debugger), "zombie" or "gone", from /proc/<pid>/stat.
std::string process_state(int pid);

int64_t realtime_ns();

}  // namespace ddpx::trace
