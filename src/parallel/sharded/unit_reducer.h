// The sharded layouts' gradient sync (gradient_sync.h): shard units (shard_unit.h)
// reduce-scattered over the replicas, each the moment the armed backward has made the last of
// its parameters' gradients, at most two at once (each holds the unit's whole gradients as its
// input: two overlap communication with backward without holding every unit's). After finish()
// each shard's .grad() is its rows' average over the replicas. The sharded plan keeps one over
// all its units, armed for its backward; a pipeline one a stage over that stage's unit, not
// armed: finish() launches it after the schedule.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "distributed/bucket_policy.h"
#include "parallel/gradient_sync.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace ddpx::parallel {

class ShardUnit;

class UnitReducer : public GradientSync {
 public:
  // `units` (in the order every replica reduces them) outlive this reducer. `free_full`: the
  // reduce frees the whole gradients (ZeRO-2/3; ZeRO-1 keeps them). `policy`: whether the group
  // averages as it reduces. Hooks every parameter that requires grad; throws
  // ddpx::Error(kUsage) naming one that is not a leaf.
  UnitReducer(std::vector<ShardUnit*> units, std::shared_ptr<c10d::ProcessGroup> group,
              bool free_full, dist::BucketPolicy policy);
  ~UnitReducer() override;  // removes its hooks
  UnitReducer(const UnitReducer&) = delete;
  UnitReducer& operator=(const UnitReducer&) = delete;

  void begin_iteration(bool sync) override;
  void arm_next_backward() override;
  // Units the armed backward did not complete (parameters it gave no gradient) start now, in
  // unit order, the same on every replica; then every reduce is waited for.
  void finish() override;
  size_t launches() const override;  // the units with a parameter that requires grad
  size_t launched() const override { return started_; }
  // A backward that failed: the hooks stop launching (what is under way is left to finish()).
  void disarm() { armed_ = false; }

 private:
  void on_grad_ready(size_t unit);
  void start(size_t unit);  // bounded: finishes the oldest of two in flight first

  std::vector<ShardUnit*> units_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  bool free_full_ = true;
  dist::BucketPolicy policy_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<size_t> expected_;   // per unit: parameters whose gradient backward accumulates
  std::vector<size_t> remaining_;  // per unit, the armed backward
  std::vector<size_t> in_flight_;  // units whose reduce-scatter runs, oldest first (at most 2)
  size_t started_ = 0;             // units launched since begin_iteration()
  bool sync_ = false;
  bool armed_ = false;
};

}  // namespace ddpx::parallel
