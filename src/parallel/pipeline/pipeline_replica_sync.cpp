// The pipeline plan's replicas (see pipeline_plan.h): each of this rank's stages syncs its
// gradients over the stage's replicas through a gradient sync of its own (gradient_sync.h),
// finished after the schedule: whole replicas average them through a reducer (reducer.h),
// armed for the stage's last micro-batch backward; sharded ones reduce-scatter the stage's
// shard unit (unit_reducer.h, built with the units in pipeline_shards.cpp) after the schedule.
#include <map>
#include <set>

#include "core/timer.h"
#include "distributed/bucket_policy.h"
#include "distributed/context.h"
#include "parallel/data/reducer.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

void PipelinePlan::build_reducers() {
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& p : model_.ptr()->named_parameters(/*recurse=*/true))
    names[p.value().unsafeGetTensorImpl()] = p.key();
  DdpOptions sync;
  sync.first_bucket_bytes = options_.first_bucket_bytes;
  sync.bucket_bytes = options_.bucket_bytes;
  // A parameter that no micro-batch reached averages what its .grad holds (zero), as DDP's
  // find_unused_parameters: a stage's layers need not all contribute to the loss.
  sync.find_unused_parameters = true;
  // Where the replicas' transport reduces the buckets in place, and averages as it sums.
  sync.buckets = replicas_->bucket_policy();
  // Stages take turns on one replica group: each launches its buckets during its own last
  // backward, in the same order on every replica (they run the same schedule).
  // A parameter two layers share (tied) has one gradient: the first of this rank's stages that
  // uses it averages it (interleaved, its last backward is the rank's last).
  std::set<const c10::TensorImpl*> seen;
  for (int stage : my_stages_) {
    std::vector<torch::Tensor> params;
    std::vector<std::string> param_names;
    for (size_t l = bounds_[stage]; l < bounds_[stage + 1]; ++l) {
      for (const auto& t : layers_[l].parameters) {
        if (!t.requires_grad() || !seen.insert(t.unsafeGetTensorImpl()).second) continue;
        params.push_back(t);
        auto it = names.find(t.unsafeGetTensorImpl());
        param_names.push_back(it != names.end() ? it->second : layers_[l].name);
      }
    }
    syncs_.push_back(params.empty()
                         ? nullptr
                         : std::make_unique<Reducer>(std::move(params), std::move(param_names),
                                                     replicas_->process_group(), sync));
  }
}

void PipelinePlan::finish_replica_sync() {
  Stopwatch watch;
  for (auto& replica_sync : syncs_) {
    if (replica_sync) replica_sync->finish();  // in stage order on every replica
  }
  stats_.sync_wait_seconds = watch.seconds();
  if (options_.shard == ShardMode::kFull) {
    for (auto& unit : units_) unit.release();  // gathered again before the next forward
  }
}

}  // namespace ddpx::parallel
