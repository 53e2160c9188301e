// Which parallel plan a run uses (see plan_choice.h).
#include "train/plan_choice.h"

#include <fmt/format.h>

#include <optional>

#include "core/log.h"
#include "distributed/context.h"
#include "models/checkpointed_model.h"
#include "optim/amp.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/data/deterministic_plan.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/sharded/sharded_plan.h"
#include "parallel/tensor/tensor_parallel_plan.h"
#include "train/job.h"

namespace ddpx::train {
namespace {

// What a sharded plan's all-gathers send (--shard_gather_dtype; auto: --amp's dtype).
c10::ScalarType gather_dtype(const TrainOptions& o) {
  switch (o.deterministic ? GatherDtype::kFp32 : o.shard_gather_dtype) {
    case GatherDtype::kAuto:
      if (auto dtype = optim::amp_dtype(o.amp)) return *dtype;
      break;
    case GatherDtype::kFp32:
      break;
    case GatherDtype::kBf16:
      return torch::kBFloat16;
    case GatherDtype::kFp16:
      return torch::kHalf;
  }
  return c10::ScalarType::Undefined;
}

}  // namespace

parallel::Mesh mesh_of(const TrainOptions& o, int world_size) {
  parallel::MeshSizes sizes;
  sizes.pipeline = std::max(o.pipeline_parallel, 1);
  sizes.tensor = std::max(o.tensor_parallel, 1);
  sizes.sharded = o.shard != parallel::ShardMode::kNone;
  return parallel::Mesh::build(sizes, world_size);
}

bool plan_places_model(const TrainOptions& o) {
  return o.pipeline_parallel > 1 && o.tensor_parallel <= 1;
}

ChosenPlan choose_plan(const TrainOptions& o, dist::Context& context, const parallel::Mesh& mesh,
                       torch::nn::AnyModule model, const parallel::OptimizerFactory& make_optimizer,
                       bool loss_scaling, const std::vector<int64_t>& sample_shape,
                       c10::ScalarType sample_dtype) {
  ChosenPlan chosen;
  const auto checkpointing = models::parse_activation_checkpointing(o.activation_checkpointing);
  if (checkpointing.every > 0) {
    log::out("activation checkpointing: {} (those blocks recompute their forward in backward)",
             models::name(checkpointing));
  }
  std::optional<parallel::PipelineOptions> pipeline;
  if (o.pipeline_parallel > 1) {
    pipeline.emplace();
    pipeline->stages = o.pipeline_parallel;
    const int64_t replica_batch = per_rank_batch(o, mesh.data_size());
    check_pipeline_batch(o, replica_batch);  // before the first collective, on every rank
    pipeline->microbatches = pipeline_microbatches(o, replica_batch);
    pipeline->schedule = o.pipeline_schedule;
    pipeline->stages_per_rank = pipeline_stages_per_rank(o);
    pipeline->balance = o.pipeline_balance;
    pipeline->sample_shape = sample_shape;
    pipeline->sample_dtype = sample_dtype;
    pipeline->micro_batch = replica_batch / pipeline->microbatches;
    pipeline->model_name = o.model;
    pipeline->checkpointing = checkpointing;
    pipeline->shard = o.shard;
    pipeline->gather_dtype = gather_dtype(o);
    if (o.tensor_parallel <= 1) pipeline->mesh = mesh;  // else the tensor plan's slice of it
    if (plan_places_model(o)) {
      pipeline->device = context.device();
      pipeline->channels_last = o.channels_last;
    }
  }
  if (pipeline && o.tensor_parallel <= 1) {
    chosen.plan = std::make_unique<parallel::PipelinePlan>(std::move(model), context,
                                                           make_optimizer, *pipeline);
    return chosen;
  }
  if (o.tensor_parallel > 1) {
    parallel::TensorParallelOptions tensor;
    tensor.size = o.tensor_parallel;
    tensor.sequence_parallel = o.sequence_parallel;
    tensor.vocab_divisible_by = o.vocab_divisible_by;
    tensor.checkpointing = checkpointing;
    tensor.shard = o.shard;
    tensor.replicas.ddp.broadcast_buffers = o.broadcast_buffers;
    tensor.replicas.ddp.find_unused_parameters = o.find_unused_parameters;
    tensor.model_name = o.model;
    tensor.label_smoothing = o.label_smoothing;
    tensor.pipeline = pipeline;  // the 3-D mesh: a pipeline of tensor-parallel stages
    tensor.mesh = mesh;
    chosen.plan = std::make_unique<parallel::TensorParallelPlan>(std::move(model), context,
                                                                 make_optimizer, tensor);
    return chosen;
  }
  // Every other plan runs the model's forward: the wrapper's, which recomputes the blocks.
  model = models::with_activation_checkpointing(model, checkpointing, o.model);
  if (o.deterministic && (o.shard == parallel::ShardMode::kNone || !context.distributed())) {
    parallel::DeterministicOptions deterministic;
    deterministic.atom = o.deterministic_atom;
    deterministic.seed = static_cast<uint64_t>(o.seed);
    deterministic.model_name = o.model;
    chosen.plan = std::make_unique<parallel::DeterministicPlan>(std::move(model), context,
                                                                make_optimizer, deterministic);
    return chosen;
  }
  if (o.shard != parallel::ShardMode::kNone && context.distributed()) {
    parallel::ShardedOptions sharded;
    sharded.mode = o.shard;
    sharded.units = o.shard_units;
    sharded.broadcast_buffers = o.broadcast_buffers;
    sharded.sync_bn = o.sync_bn;
    sharded.model_name = o.model;
    if (o.deterministic) {
      sharded.deterministic_atom = o.deterministic_atom;
      sharded.seed = static_cast<uint64_t>(o.seed);
    }
    sharded.gather_dtype = gather_dtype(o);
    auto plan =
        std::make_unique<parallel::ShardedPlan>(std::move(model), context, make_optimizer, sharded);
    chosen.sync_bn_layers = plan->sync_bn_layers();
    chosen.plan = std::move(plan);
    return chosen;
  }
  parallel::DataParallelOptions dp;
  dp.ddp.broadcast_buffers = o.broadcast_buffers;
  dp.ddp.find_unused_parameters = o.find_unused_parameters;
  dp.ddp.comm_hook = o.comm_hook;
  dp.ddp.powersgd.rank = o.powersgd_rank;
  dp.ddp.powersgd.start_iter = o.powersgd_start_iter;
  dp.ddp.powersgd.seed = static_cast<uint64_t>(o.seed);
  dp.step.inside_backward = !loss_scaling && o.clip_grad_norm == 0;
  // The split step reduces in the shared-memory transport itself, uncompressed: not with a hook.
  dp.step.split = o.clip_grad_norm == 0 && o.comm_hook == dist::CommHook::kAllreduce;
  dp.sync_bn = o.sync_bn;
  dp.model_name = o.model;
  if (o.shard != parallel::ShardMode::kNone) {
    dp.note = fmt::format("--shard {} on one process: nothing to split", parallel::name(o.shard));
  }
  auto plan =
      std::make_unique<parallel::DataParallelPlan>(std::move(model), context, make_optimizer, dp);
  chosen.sync_bn_layers = plan->sync_bn_layers();
  chosen.plan = std::move(plan);
  return chosen;
}

}  // namespace ddpx::train
