// Shard units reduce-scattered as their gradients become ready (see unit_reducer.h).
#include "parallel/sharded/unit_reducer.h"

#include <torch/csrc/autograd/variable.h>

#include <utility>

#include "core/error.h"
#include "parallel/ready_hook.h"
#include "parallel/sharded/shard_unit.h"

namespace ddpx::parallel {

UnitReducer::UnitReducer(std::vector<ShardUnit*> units, std::shared_ptr<c10d::ProcessGroup> group,
                         bool free_full, dist::BucketPolicy policy)
    : units_(std::move(units)),
      group_(std::move(group)),
      free_full_(free_full),
      policy_(std::move(policy)) {
  expected_.assign(units_.size(), 0);
  for (size_t u = 0; u < units_.size(); ++u) {
    const ShardUnit& unit = *units_[u];
    for (size_t i = 0; i < unit.params().size(); ++i) {
      const auto& p = unit.params()[i];
      if (!p.requires_grad()) continue;
      ++expected_[u];
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      DDPX_CHECK(accumulator != nullptr, ErrorKind::kUsage,
                 "parameter '{}' is not a leaf tensor that requires grad; sharding needs "
                 "registered leaf parameters",
                 unit.param_names()[i]);
      hook_keys_.push_back(
          accumulator->add_post_hook(std::make_unique<ReadyHook>([this, u] { on_grad_ready(u); })));
      accumulators_.push_back(std::move(accumulator));
    }
  }
  remaining_ = expected_;
}

UnitReducer::~UnitReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void UnitReducer::begin_iteration(bool sync) {
  // Reduces a failed backward left under way (no finish()) end before anything starts again.
  for (size_t u : in_flight_) units_[u]->finish_reduce();
  in_flight_.clear();
  sync_ = sync;
  armed_ = false;
  started_ = 0;
  remaining_ = expected_;
}

void UnitReducer::arm_next_backward() {
  DDPX_CHECK(sync_, ErrorKind::kInternal,
             "the shard units' reducer was armed in a step that does not synchronize");
  armed_ = true;
}

void UnitReducer::on_grad_ready(size_t unit) {
  if (!armed_ || remaining_[unit] == 0) return;
  if (--remaining_[unit] == 0) start(unit);
}

void UnitReducer::start(size_t unit) {
  ShardUnit& u = *units_[unit];
  if (u.reduce_pending()) return;
  while (in_flight_.size() >= 2) {
    units_[in_flight_.front()]->finish_reduce();
    in_flight_.erase(in_flight_.begin());
  }
  const auto& shard = u.shards()[0];
  const bool averages =
      policy_.averages && policy_.averages(shard.scalar_type(), shard.device().type());
  u.start_reduce(*group_, free_full_, averages);
  in_flight_.push_back(unit);
  ++started_;
}

size_t UnitReducer::launches() const {
  size_t n = 0;
  for (size_t e : expected_) n += e > 0 ? 1 : 0;
  return n;
}

void UnitReducer::finish() {
  armed_ = false;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (remaining_[u] != 0) {
      remaining_[u] = 0;
      start(u);
    }
  }
  for (size_t u : in_flight_) units_[u]->finish_reduce();
  in_flight_.clear();
}

}  // namespace ddpx::parallel
