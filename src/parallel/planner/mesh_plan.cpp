// `ddpx plan`'s pipeline and tensor-parallel meshes (see mesh_plan.h).
#include "parallel/planner/mesh_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/pipeline_defaults.h"

namespace ddpx::parallel {
namespace {

constexpr double kWordBytes = 4;

// The states of `own` parameters on a rank, and the replicas' bucket rebuild.
void add_states(MeshPrediction& p, double own, const PlanRequest& r) {
  p.params = kWordBytes * own;
  p.grads = kWordBytes * own;
  p.optimizer = r.optimizer_bytes_per_param * own;
  p.transient = p.data > 1 ? kWordBytes * own : 0;
}

// The replica's batch (images and labels), which every rank of the replica receives.
double batch_bytes(const ModelMemory& model, const MeshPrediction& p) {
  return model.sample_bytes * static_cast<double>(p.batch);
}

// The whole model and a tensor rank's pieces, copied out of it, before the whole one's split
// parameters are freed.
double tensor_start(const ModelMemory& model, const TensorMemory& m) {
  return kWordBytes * (static_cast<double>(model.parameters) +
                       static_cast<double>(m.split_parameters) / m.ranks);
}

// A pipeline of `layers` on P = q.stages ranks a replica, each stage split over `tensor` ranks
// (1: whole): the rank that peaks, and the pipeline's flags (`tensor_flags` after P's).
MeshPrediction pipeline_mesh(const ModelMemory& model, const std::vector<LayerMemory>& layers,
                             const PlanRequest& r, const PipelineRequest& q, ShardMode shard,
                             int tensor, const std::string& tensor_flags) {
  const int n = r.world_size, stages = q.stages;
  const int chunks = q.schedule == PipelineSchedule::kInterleaved ? q.stages_per_rank : 1;
  const std::string split =
      tensor > 1 ? fmt::format("--pipeline_parallel {} x --tensor_parallel {}", stages, tensor)
                 : fmt::format("--pipeline_parallel {}", stages);
  const MeshSizes sizes{stages, tensor, 1, shard != ShardMode::kNone};
  DDPX_CHECK(stages >= 2 && Mesh::fits(sizes, n), ErrorKind::kUsage,
             "plan: {} does not divide {} GPUs", split, n);
  MeshPrediction p;
  p.pipeline = stages;
  p.tensor = tensor;
  p.data = Mesh::build(sizes, n).data_size();
  DDPX_CHECK(shard == ShardMode::kNone || p.data > 1, ErrorKind::kUsage,
             "plan: {} on {} GPUs leaves one replica: --shard {} has no ranks to shard over", split,
             n, name(shard));
  p.shard = shard;
  p.batch = r.batch_size * stages * tensor;  // the global batch of N GPUs at --batch_size each
  p.microbatches = pipeline_microbatches(q.microbatches, stages, p.batch);  // ddpx train's
  DDPX_CHECK(p.batch % p.microbatches == 0, ErrorKind::kUsage,
             "plan: --microbatches {} does not divide the replica's batch {} ({} a GPU x {} "
             "GPUs a replica); give a divisor",
             p.microbatches, p.batch, r.batch_size, stages * tensor);
  const PipelineShape shape{stages, p.microbatches, chunks};
  const std::string problem = schedule_problem(q.schedule, shape);
  DDPX_CHECK(problem.empty(), ErrorKind::kUsage, "plan: --pipeline_schedule {} with {} stages: {}",
             name(q.schedule), stages, problem);
  const double micro = static_cast<double>(p.batch / p.microbatches);
  DDPX_CHECK(!q.batch_norm || micro > 1, ErrorKind::kUsage,
             "plan: --microbatches {} makes micro-batches of 1 sample, which leave BatchNorm one "
             "value a channel; give fewer --microbatches or a larger --batch_size",
             p.microbatches);

  std::vector<double> costs;
  for (const auto& l : layers) {
    costs.push_back(q.balance == PipelineBalance::kTime ? l.seconds
                                                        : static_cast<double>(l.parameters));
  }
  // The model cut into V x P stages; rank s runs stages s, s + P, ... (V = 1 but interleaved).
  const std::vector<size_t> bounds = balance_stages(costs, stages * chunks, q.model_name);
  std::vector<std::vector<double>> held(static_cast<size_t>(stages));  // a micro-batch's, a chunk
  std::vector<double> own(static_cast<size_t>(stages), 0), extra(static_cast<size_t>(stages), 0);
  for (int s = 0; s < stages; ++s) {
    for (int c = 0; c < chunks; ++c) {
      const size_t stage = static_cast<size_t>(c * stages + s);
      const size_t first = bounds[stage], end = bounds[stage + 1];
      double bytes = first > 0 ? layers[first].input.at(micro) : 0;  // the received input
      for (size_t l = first; l < end; ++l) {
        own[s] += static_cast<double>(layers[l].parameters);
        bytes += layers[l].held.at(micro);
        extra[s] = std::max(extra[s], layers[l].backward_extra.at(micro));
      }
      held[s].push_back(bytes);
    }
  }
  // Stage s holds the micro-batches its schedule keeps in flight, each chunk's at its own size.
  const ScheduleRun run = simulate_schedule(q.schedule, shape, 1.0, 2.0, held);

  double worst = -1;
  for (int s = 0; s < stages; ++s) {
    MeshPrediction stage = p;
    add_states(stage, own[s], r);
    if (shard != ShardMode::kNone) {  // see mesh_plan.h
      const double shards = kWordBytes * own[s] / p.data;
      stage.params += shards;
      stage.grads += shards;
      stage.optimizer = r.optimizer_bytes_per_param * own[s] / p.data;
      stage.transient = kWordBytes * own[s];  // the reduce-scatter's input
    }
    stage.activations = run.max_bytes[static_cast<size_t>(s)] + extra[s] + batch_bytes(model, p);
    // The last stage keeps only each micro-batch's predictions for the step's metrics (8 bytes
    // a sample or token, not counted); the output in flight is in its layers' bytes.
    // Built whole in host memory; only the rank's stages reach its GPU (pipeline_plan.h).
    stage.start = kWordBytes * own[s];
    if (stage.peak() > worst) {
      worst = stage.peak();
      stage.worst_stage = s;
      p = stage;
    }
  }
  p.flags = fmt::format("--pipeline_parallel {}{} --microbatches {}", stages, tensor_flags,
                        p.microbatches);
  if (q.schedule != PipelineSchedule::k1F1B)
    p.flags += fmt::format(" --pipeline_schedule {}", name(q.schedule));
  if (chunks > 1) p.flags += fmt::format(" --stages_per_rank {}", chunks);
  p.flags += fmt::format(" --batch_size {}", p.batch);
  if (tensor == 1 && q.balance != PipelineBalance::kTime)
    p.flags += fmt::format(" --pipeline_balance {}", name(q.balance));
  if (shard != ShardMode::kNone) p.flags += fmt::format(" --shard {}", name(shard));
  return p;
}

}  // namespace

MeshPrediction predict_pipeline(const ModelMemory& model, const std::vector<LayerMemory>& layers,
                                const PlanRequest& r, const PipelineRequest& q, ShardMode shard) {
  MeshPrediction p = pipeline_mesh(model, layers, r, q, shard, 1, "");
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  return p;
}

MeshPrediction predict_pipeline_tensor(const ModelMemory& model, const TensorMemory& m,
                                       const PlanRequest& r, const PipelineRequest& q,
                                       ShardMode shard) {
  DDPX_CHECK(m.ranks >= 2 && !m.layers.empty(), ErrorKind::kInternal,
             "plan: the 3-D mesh needs a tensor probe of the split layers at T >= 2");
  PipelineRequest by_params = q;  // the split layers cannot be timed by one rank
  by_params.balance = PipelineBalance::kParams;
  const std::string tensor_flags = fmt::format(" --tensor_parallel {}{}", m.ranks,
                                               m.sequence_parallel ? " --sequence_parallel" : "");
  MeshPrediction p = pipeline_mesh(model, m.layers, r, by_params, shard, m.ranks, tensor_flags);
  p.sequence_parallel = m.sequence_parallel;
  // The whole model reaches the GPU, then the split layers' pieces are copied out of it (as
  // tensor parallelism alone); the pipeline then frees what is not the rank's stage.
  p.start = std::max(p.start, tensor_start(model, m));
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  return p;
}

MeshPrediction predict_tensor(const ModelMemory& model, const TensorMemory& m, const PlanRequest& r,
                              ShardMode shard) {
  const int n = r.world_size;
  const MeshSizes sizes{1, m.ranks, 1, shard != ShardMode::kNone};
  DDPX_CHECK(m.ranks >= 2 && Mesh::fits(sizes, n), ErrorKind::kUsage,
             "plan: --tensor_parallel {} does not divide {} GPUs", m.ranks, n);
  MeshPrediction p;
  p.tensor = m.ranks;
  p.data = Mesh::build(sizes, n).data_size();
  DDPX_CHECK(shard == ShardMode::kNone || p.data > 1, ErrorKind::kUsage,
             "plan: --tensor_parallel {} on {} GPUs leaves one replica: --shard {} has no ranks "
             "to shard over",
             m.ranks, n, name(shard));
  p.sequence_parallel = m.sequence_parallel;
  p.shard = shard;
  p.batch = r.batch_size * m.ranks;
  p.activations = m.activations.at(static_cast<double>(p.batch));
  if (shard == ShardMode::kNone) {
    add_states(p, static_cast<double>(m.parameters), r);
    p.grads_persist = p.data > 1;
  } else {
    // The pieces as a model of their own, sharded over the D replicas.
    ModelMemory pieces;
    pieces.parameters = m.parameters;
    pieces.units = m.units;
    pieces.activation_fixed = m.activations.fixed;
    pieces.activation_per_sample = m.activations.per_sample;
    PlanRequest replicas = r;
    replicas.world_size = p.data;
    replicas.batch_size = p.batch;
    const ModePrediction z = predict(pieces, shard, replicas);
    p.params = z.params;
    p.grads = z.grads;
    p.optimizer = z.optimizer;
    p.transient = z.transient;
    p.activations = z.activations + z.backward_transient;
    if (shard == ShardMode::kOptimizer) {
      // ZeRO-1 keeps only the gradients' shard between steps: the pieces' whole gradients are
      // freed at zero_grad and come back in backward as the activations go, and the split
      // blocks (a transformer's) free activations as fast as they make gradients, so the whole
      // gradients peak after the activations, in the step, beside its reduce-scatter buffers.
      const double whole = kWordBytes * static_cast<double>(m.parameters);
      p.grads -= whole;
      p.transient += whole;
    }
  }
  p.activations += batch_bytes(model, p);
  p.start = tensor_start(model, m);
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  p.flags = fmt::format(
      "--tensor_parallel {}{}{} --batch_size {}", m.ranks,
      m.sequence_parallel ? " --sequence_parallel" : "",
      shard == ShardMode::kNone ? std::string() : std::string(" --shard ") + name(shard), p.batch);
  return p;
}

}  // namespace ddpx::parallel
