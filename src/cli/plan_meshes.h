// `ddpx plan`'s second table: the meshes that split the model across ranks (pipeline stages,
// tensor pieces, and pipelines of tensor-parallel stages) with the rest of the GPUs as
// data-parallel replicas, each probed on this CPU
// (parallel/planner/split_probe.h) and predicted (mesh_plan.h); and why a mesh is not offered.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/activation_checkpoint.h"
#include "parallel/planner/depth_scale.h"
#include "parallel/planner/mesh_plan.h"

namespace ddpx::cli {

struct MeshSearch {
  std::string model_name;
  std::function<torch::nn::AnyModule()> build;  // the whole model, fp32, on the CPU
  // The whole model already built (the one `ddpx plan` measured), or empty: search_meshes()
  // probes on it first, then splits it for the first tensor probe; `build` makes the others.
  torch::nn::AnyModule model;
  // That model's layers as measure_layers() probed them (ddpx plan does for a language model),
  // or none: search_meshes() probes them for the pipelines.
  std::optional<std::vector<parallel::LayerMemory>> layers;
  parallel::ProbeOptions probe;
  models::ActivationCheckpointing checkpointing;
  parallel::PlanRequest request;
  int microbatches = 0;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 2;  // V, interleaved only
  parallel::PipelineBalance balance = parallel::PipelineBalance::kTime;
  // A deep language model: `build` makes its two-block copy and `build_one` its one-block copy,
  // whose probes `scale` carries to the model's depth and sequence (depth_scale.h).
  parallel::DepthScale scale;
  std::function<torch::nn::AnyModule()> build_one;
};

struct MeshResults {
  // Tensor parallel first, then pipelines, then pipelines of tensor-parallel stages.
  std::vector<parallel::MeshPrediction> meshes;
  std::vector<std::string> notes;  // what is not offered, and why
};

// Every P and T > 1 that divides the GPUs, and every P x T that does: probes and predictions
// (minutes for a large model on many GPUs: two tensor-parallel probes, with and without sequence
// parallelism, each also running the split layers one at a time where a 3-D mesh is possible).
MeshResults search_meshes(const parallel::ModelMemory& whole, MeshSearch search);

// The mesh to use when no shard mode fits: the least split (smallest P or T) that fits, tensor
// parallel before a pipeline of the same size (no bubble), without sequence parallel first.
const parallel::MeshPrediction* recommended_mesh(const MeshResults& results);

void print_meshes(const MeshResults& results, double usable);
std::string mesh_json(const parallel::MeshPrediction& p, double usable, bool recommended);

}  // namespace ddpx::cli
