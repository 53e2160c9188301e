// The pipeline plan's sharded replicas (see pipeline_plan.h, "Sharded replicas"): each of this
// rank's stages one unit (shard_unit.h) over the stage's replicas, reduce-scattered after the
// schedule by a unit reducer of its own (unit_reducer.h; finished as pipeline_replica_sync.cpp
// finishes the whole replicas' reducers), gathered again before the next forward or evaluation,
// and its optimizer state brought whole into the pipeline's checkpoint.
#include <fmt/format.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <set>
#include <sstream>

#include "distributed/bucket_policy.h"
#include "distributed/context.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/unit_reducer.h"
#include "parallel/storage.h"

namespace ddpx::parallel {

void PipelinePlan::build_units() {
  own_storages(params_);
  // As the sharded plan's units: where the replicas' group has peer memory (one host), the
  // shards (ZeRO-1/2: the parameters too) lie there, and gathers copy straight from the peers'
  // shards into the parameters. No pool of collective buffers: a stage reduces once a step, not
  // once a unit during backward, and `ddpx plan`'s mesh rows count no pool.
  const dist::BucketPolicy policy = replicas_->bucket_policy();
  const bool resident =
      keeps_resident(options_.shard, options_.gather_dtype, replicas_->peer_memory());
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& p : model_.ptr()->named_parameters(/*recurse=*/true))
    names[p.value().unsafeGetTensorImpl()] = p.key();
  size_t next = 0;  // params_ are the stages' in my_stages_ order, layer by layer, each once
  std::set<const c10::TensorImpl*> seen;
  std::vector<int> unit_of(my_stages_.size(), -1);  // by chunk
  for (size_t chunk = 0; chunk < my_stages_.size(); ++chunk) {
    const int stage = my_stages_[chunk];
    std::vector<torch::Tensor> params;
    std::vector<std::string> param_names;
    std::vector<size_t> order;
    for (size_t l = bounds_[stage]; l < bounds_[stage + 1]; ++l) {
      for (const auto& t : layers_[l].parameters) {
        if (!seen.insert(t.unsafeGetTensorImpl()).second) continue;  // tied: in an earlier unit
        params.push_back(t);
        auto it = names.find(t.unsafeGetTensorImpl());
        param_names.push_back(it != names.end() ? it->second : layers_[l].name);
        order.push_back(next++);
      }
    }
    if (params.empty()) continue;  // a stage without parameters has nothing to shard
    unit_of[chunk] = static_cast<int>(units_.size());
    units_.emplace_back(fmt::format("stage {}", stage), params, param_names, replica_,
                        replica_count_, policy.allocate, nullptr, resident);
    if (options_.gather_dtype != c10::ScalarType::Undefined)
      units_.back().set_gather_dtype(options_.gather_dtype);
    unit_order_.push_back(order);
  }
  shards_.resize(params_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < unit_order_[u].size(); ++i)
      shards_[unit_order_[u][i]] = units_[u].shards()[i];
  }
  gathers_in_place_ = gather_in_place_if_shared(units_, *replicas_->process_group(), replica_count_,
                                                replicas_->peer_memory());
  for (int u : unit_of) {
    syncs_.push_back(u < 0 ? nullptr
                           : std::make_unique<UnitReducer>(
                                 std::vector<ShardUnit*>{&units_[static_cast<size_t>(u)]},
                                 replicas_->process_group(),
                                 /*free_full=*/options_.shard != ShardMode::kOptimizer, policy));
  }
  if (options_.shard == ShardMode::kFull) {
    for (auto& unit : units_) unit.release();
  }
}

void PipelinePlan::gather_units(bool full_precision) {
  auto& group = *replicas_->process_group();
  for (auto& unit : units_) unit.start_gather(group, full_precision);
  for (auto& unit : units_) unit.finish_gather();
}

std::string PipelinePlan::save_optimizer_part() {
  // Collective over the stage's replicas: each shard's state gathered whole.
  torch::serialize::OutputArchive archive;
  save_full_optimizer(*optimizer_, units_, unit_order_, *replicas_->process_group(),
                      make_optimizer_, archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void PipelinePlan::load_optimizer_part(torch::optim::Optimizer& whole) {
  const auto all = model_.ptr()->parameters();
  std::map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < all.size(); ++i) index[all[i].unsafeGetTensorImpl()] = i;
  std::vector<std::vector<size_t>> order;
  for (const auto& unit : units_) {
    order.emplace_back();
    for (const auto& p : unit.params()) order.back().push_back(index.at(p.unsafeGetTensorImpl()));
  }
  take_shard_states(*optimizer_, units_, order, replica_, whole, all);
}

}  // namespace ddpx::parallel
