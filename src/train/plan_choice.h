// Which parallel plan (parallel/plan.h) a run's options ask for, built over the placed model (a
// pipeline places its own stages: plan_places_model()).
// --pipeline_parallel P > 1: the pipeline plan; --tensor_parallel T > 1: the tensor-parallel
// plan; else --shard none (or one process): the data-parallel plan; --shard
// optimizer|gradients|full over more than one rank: the sharded plan. The trainer's loop never
// names one.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <memory>
#include <string>

#include "parallel/mesh.h"
#include "parallel/plan.h"
#include "train/options.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::train {

struct ChosenPlan {
  std::unique_ptr<parallel::Plan> plan;
  int sync_bn_layers = 0;  // --sync_bn: the BatchNorm layers it switched (the start-up line)
};

// The run's mesh (parallel/mesh.h) over `world_size` ranks: --pipeline_parallel,
// --tensor_parallel and the data-parallel ranks that remain, sharded with --shard. Where a rank's
// batches come from is its data-parallel coordinate (Mesh::data_rank of Mesh::data_size): a
// pipeline's stages and the tensor ranks of a layer share one replica's. Throws
// ddpx::Error(kUsage) naming the flags where the world does not divide; every rank builds it
// before anything that depends on its replica (the sampler, the plan).
parallel::Mesh mesh_of(const TrainOptions& options, int world_size);

// Whether the plan puts the model on the device itself: a pipeline (without tensor parallelism)
// takes it whole in host memory and moves only its rank's stages there. Else the caller places
// the model before choose_plan().
bool plan_places_model(const TrainOptions& options);

// `sample_shape`: one input sample's (C, H, W), or a language model's (T) token ids of
// `sample_dtype`, which the pipeline times its layers with.
// `loss_scaling`: fp16's scaler reads the gradients between backward and the step, so the
// update may not run inside backward; neither may it with --clip_grad_norm, which also needs
// every rank to hold the whole averaged gradient (no split step).
// `mesh`: mesh_of(options, the context's world size).
ChosenPlan choose_plan(const TrainOptions& options, dist::Context& context,
                       const parallel::Mesh& mesh, torch::nn::AnyModule model,
                       const parallel::OptimizerFactory& make_optimizer, bool loss_scaling,
                       const std::vector<int64_t>& sample_shape,
                       c10::ScalarType sample_dtype = c10::ScalarType::Float);

}  // namespace ddpx::train
