// Groups split from the job's process group, as c10d's new_subgroups and a DeviceMesh's
// dimensions: a pipeline stage's data-parallel replicas, a tensor-parallel group. Every rank
// calls split_group() with the same partition of the ranks; each builds the group it is in, over
// the job's store under a prefix of the split's name, with the backends the job's group has
// (Gloo, through shared memory when the job's is; NCCL for CUDA tensors when the job has it).
// The result is a Context whose rank and world size are this rank's within its group, so DDP and
// every other user of a Context run on it unchanged. Sub-groups are not in the collective record
// unless asked (SplitOptions::recorded).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/context.h"

namespace ddpx::dist {

struct SplitOptions {
  // false: Gloo alone for CPU tensors even where the job's group has a transport with peer
  // memory, the shared-memory one (a group for point-to-point transfers, which that transport
  // hands to Gloo anyway); the group's Context::peer_memory() is then null.
  bool peer_memory = true;
  // In the job's collective record (the parent's), each record naming the group by the split's
  // `name` (trace::Entry::group), with its watch over NCCL's work: a hang or a failure in the
  // group ends the job with the record's verdict (docs/distributed.md, "Faults").
  bool recorded = false;
};

// `groups`: disjoint lists of global ranks covering every rank, the same on every rank; a rank's
// position in its list is its rank in the group. Collective over the members of each group.
// A group of one is a lone Context (no process group; its collectives are the identity).
// Throws ddpx::Error(kInternal) when this rank is in no group or in two.
std::shared_ptr<Context> split_group(const Context& parent,
                                     const std::vector<std::vector<int>>& groups,
                                     const std::string& name, const SplitOptions& options = {});

}  // namespace ddpx::dist
