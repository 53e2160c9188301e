// Blocking helpers over c10d::ProcessGroup shared by Context and the reducer: waiting on a
// Work with c10d's exceptions turned into ddpx::Error(kDist), and coalesced broadcast (one
// collective per dtype and size cap instead of one per tensor).
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

namespace ddpx::trace {
class CollectiveTrace;
}

namespace ddpx::dist {

class PeerMemory;
class PeerSteps;

// Waits for `work`; a failure becomes ddpx::Error(kDist) that says which collective (`what`)
// and, for a traced group's work, the verdict of explain_failure().
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

// Blocking in-place sum of one tensor across the group.
void all_reduce_sum(c10d::ProcessGroup& group, torch::Tensor& tensor, const std::string& what);

// Blocks until every rank of the group has called it. c10d::ProcessGroup::barrier() (torch 2.11)
// keeps its tensor in a function-level static: two threads of one process calling it on two
// groups at once (ranks as threads, thread_ranks.h) race on that tensor's reference count and
// corrupt the heap (one run in a few hundred aborted in malloc). This one makes its own.
void barrier(c10d::ProcessGroup& group);

// Copies `tensors` from `root` to every rank, flattening same-dtype tensors into buffers of
// at most `cap_bytes` so that many small tensors cost few collectives.
void broadcast_coalesced(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                         int root, int64_t cap_bytes = int64_t{250} << 20);

// Every rank's copy of a same-shaped int64 tensor, in rank order.
std::vector<torch::Tensor> all_gather(c10d::ProcessGroup& group, const torch::Tensor& tensor);

// `op` on the transport's thread (PeerMemory::submit; `memory` is `group`'s), recorded in
// `group`'s collective record, when it keeps one, as `name` with `tensors`' signature (a meta
// tensor will do): the collective steps that run there outside c10d's calls (the sharded SGD
// step's reduce-and-apply, a sharded unit's gather-and-apply) count as the collectives they
// stand for.
c10::intrusive_ptr<c10d::Work> submit_steps(c10d::ProcessGroup& group, PeerMemory& memory,
                                            const char* name,
                                            const std::vector<at::Tensor>& tensors,
                                            std::function<void(PeerSteps&)> op);

}  // namespace ddpx::dist
