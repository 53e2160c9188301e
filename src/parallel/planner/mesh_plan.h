// `ddpx plan`'s meshes: what one rank holds when the model is split across ranks rather than
// (or besides) sharded: pipeline stages (--pipeline_parallel P) and tensor pieces
// (--tensor_parallel T), each with the rest of the GPUs as data-parallel replicas. The global batch
// stays the one plain DDP would train (N GPUs x --batch_size), so a replica of P or T ranks takes
// --batch_size B x P or B x T.
//
// Per rank, fp32 (K optimizer bytes a parameter, Psi_r the rank's own parameters):
//   start       the whole model, 4 Psi: every rank builds it (and moves it to its GPU) before the
//               plan frees what is not its own (a tensor rank: also its pieces' copies). A
//               pipeline's ranks build it in host memory and move only their stages to the GPU
//               (pipeline_plan.h): 4 Psi_r there, so a pipeline can fit a model one GPU cannot.
//   states      (4 + 4 + K) Psi_r; with more than one replica the replicas' DDP rebuilds its
//               buckets once (transient 4 Psi_r), as plain DDP does
//   pipeline    stage s of P under 1F1B holds min(M, P - s) micro-batches' activations of its
//               layers (GPipe: all M) and its received input, plus the most one layer's backward
//               adds; stages are cut as ddpx train cuts them (stage_split.h) from the probe's
//               per-layer times or parameter counts. Interleaved, the model is cut into V x P
//               stages and rank s holds stages s, s + P, ...: the schedule's simulation counts
//               the bytes of each stage's micro-batches in flight. The peak is the worst rank.
//   tensor      the split model's activations as measured on T thread ranks (split_probe.h); with
//               one replica there is no DDP to keep the gradients in buckets: zero_grad frees
//               them, and backward brings them back as it frees the activations
//   tensor x --shard  the replicas shard the pieces (ZeRO-1/2/3 over D = N/T ranks): a rank's
//               pieces and whole layers, grouped into units as the sharded plan groups them,
//               take memory_plan.h's arithmetic for that mode at world D, with the split model's
//               measured activations; under ZeRO-1 the whole gradients (4 Psi_r) come in backward
//               as the activations go (zero_grad frees them) and peak in the step, beside the
//               reduce-scatter's buffers, not on top of the activations
//   pipeline x --shard  the D = N/P replicas shard each stage (pipeline_plan.h): through a step
//               a rank holds its stages whole (4 Psi_r, gathered once a step under every mode)
//               and their accumulating gradients (4 Psi_r) beside its shards of both (4 S each,
//               S = Psi_r / D, padding left out) and the optimizer's K S; the reduce-scatter's
//               input (4 Psi_r) comes after the last backward. Against the unsharded stage that
//               saves (K (D - 1) - 8) Psi_r / D: nothing for AdamW on 2 replicas, more on more.
//               ZeRO's three stages peak alike here; `full` only frees the stages between steps.
//   pipeline x tensor (the 3-D mesh)  the pipeline's arithmetic above over the split model's
//               layers as the T thread ranks measured them (split_probe.h), cut by parameters as
//               ddpx train cuts them, on D = N/(P T) replicas (sharded as a pipeline's with
//               --shard); start as tensor parallelism's: the whole model reaches the GPU before
//               it is split and cut.
// Every mesh's activations include the replica's batch of images and labels, which every rank of
// the replica receives (ModelMemory::sample_bytes).
// The peak is the larger of start and the states plus the larger of transient and activations.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/planner/memory_plan.h"
#include "parallel/planner/split_probe.h"

namespace ddpx::parallel {

struct MeshPrediction {
  int data = 1, pipeline = 1, tensor = 1;
  bool sequence_parallel = false;
  ShardMode shard = ShardMode::kNone;  // the replicas': --shard
  int64_t batch = 0;                   // --batch_size: per data-parallel replica
  int microbatches = 0;                // pipeline
  double start = 0;
  double params = 0, grads = 0, optimizer = 0, transient = 0, activations = 0;
  int worst_stage = -1;  // pipeline: the stage whose rank peaks highest
  // Whether the gradients stay allocated between steps (DDP's buckets, a pipeline's micro-batches
  // accumulating into them while others' activations live); else they are freed at zero_grad
  // and come back in backward as the activations go.
  bool grads_persist = true;
  double peak() const {
    const double states = params + optimizer;
    return std::max(start, grads_persist ? states + grads + std::max(transient, activations)
                                         : states + std::max({grads, transient, activations}));
  }
  bool fits = false;
  std::string flags;  // what to add to ddpx train
};

struct PipelineRequest {
  int stages = 2;        // P; must divide the world
  int microbatches = 0;  // M; 0: 2P as ddpx train (P where 2P does not divide the batch)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages_per_rank = 2;  // V, interleaved only: the model cut into V x P stages
  PipelineBalance balance = PipelineBalance::kTime;
  std::string model_name = "the model";
  bool batch_norm = false;  // micro-batches of one sample leave it one value a channel
};

// Throws ddpx::Error(kUsage) naming the flag where the layout cannot run: P not dividing the
// world, fewer layers than stages, a batch M does not split, micro-batches of one sample for a
// BatchNorm model, an interleaved M that P does not divide, `shard` with one replica.
MeshPrediction predict_pipeline(const ModelMemory& model, const std::vector<LayerMemory>& layers,
                                const PlanRequest& request, const PipelineRequest& pipeline,
                                ShardMode shard = ShardMode::kNone);

// The 3-D mesh: q.stages stages of `measured` (probed with its layers) on N/(P T) replicas.
// Throws ddpx::Error(kUsage) as predict_pipeline does, naming both sizes.
MeshPrediction predict_pipeline_tensor(const ModelMemory& model, const TensorMemory& measured,
                                       const PlanRequest& request, const PipelineRequest& pipeline,
                                       ShardMode shard = ShardMode::kNone);

// `measured` is the probe at T = measured.ranks. With `shard` the N/T replicas shard the pieces;
// throws ddpx::Error(kUsage) when there is one replica only (nothing to shard over).
MeshPrediction predict_tensor(const ModelMemory& model, const TensorMemory& measured,
                              const PlanRequest& request, ShardMode shard = ShardMode::kNone);

}  // namespace ddpx::parallel
