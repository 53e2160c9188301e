// How replicas agree on their gradients, whatever the layout: one seam with two ways through it.
// A Reducer (parallel/data/reducer.h) all-reduces buckets, so every replica ends with the
// average of every gradient (DDP; a pipeline's whole replicas, one reducer a stage). A
// UnitReducer (parallel/sharded/unit_reducer.h) reduce-scatters shard units, so each replica
// ends with the average of its own rows (ZeRO-1/2/3; a pipeline's sharded replicas, a unit a
// stage). Both count each parameter's gradient down with a post hook on its accumulator
// (ready_hook.h) and, armed, launch a bucket or unit the moment its last gradient is ready, so
// the communication overlaps the rest of backward; unarmed, finish() launches everything.
//
// Contract, for a step of one or more backward passes (micro-batches, accumulation):
//   begin_iteration(sync)  before the step's first backward; with `sync` false nothing is
//                          communicated this step and the gradients stay local sums;
//   arm_next_backward()    before the step's last backward (with `sync`): its hooks launch;
//   finish()               after it, on every replica, in the same order: launches what that
//                          backward left (parameters it gave no gradient) and waits, so the
//                          gradients the step reads are final.
// A caller with one backward a step calls all three around it. Not thread-safe against
// concurrent backward passes through the same parameters.
#pragma once

#include <cstddef>

namespace ddpx::parallel {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void begin_iteration(bool sync) = 0;
  virtual void arm_next_backward() = 0;
  virtual void finish() = 0;
  // The launches a synchronized step makes (buckets, units), and how many of them the armed
  // backward has made so far: the share of the communication that overlapped backward.
  virtual size_t launches() const = 0;
  virtual size_t launched() const = 0;
};

}  // namespace ddpx::parallel
