// `ddpx plan`'s pipeline and tensor-parallel meshes (see mesh_plan.h).
#include "parallel/planner/mesh_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

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

}  // namespace

MeshPrediction predict_pipeline(const ModelMemory& model, const std::vector<LayerMemory>& layers,
                                const PlanRequest& r, const PipelineRequest& q) {
  const int n = r.world_size, stages = q.stages;
  DDPX_CHECK(stages >= 2 && n % stages == 0, ErrorKind::kUsage,
             "plan: --pipeline_parallel {} does not divide {} GPUs", stages, n);
  DDPX_CHECK(q.schedule != PipelineSchedule::kInterleaved, ErrorKind::kUsage,
             "plan: --pipeline_schedule interleaved is not planned yet; plan 1f1b or gpipe");
  MeshPrediction p;
  p.pipeline = stages;
  p.data = n / stages;
  p.batch = r.batch_size * stages;  // the global batch of N GPUs at --batch_size each
  p.microbatches = q.microbatches > 0            ? q.microbatches
                   : p.batch % (2 * stages) == 0 ? 2 * stages
                                                 : stages;
  DDPX_CHECK(p.batch % p.microbatches == 0, ErrorKind::kUsage,
             "plan: --microbatches {} does not divide the replica's batch {} ({} a GPU x {} "
             "stages); give a divisor",
             p.microbatches, p.batch, r.batch_size, stages);
  const std::string problem = schedule_problem(q.schedule, {stages, p.microbatches, 1});
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
  const std::vector<size_t> bounds = balance_stages(costs, stages, q.model_name);
  const ScheduleRun run = simulate_schedule(q.schedule, {stages, p.microbatches, 1});

  double worst = -1;
  for (int s = 0; s < stages; ++s) {
    const size_t first = bounds[static_cast<size_t>(s)], end = bounds[static_cast<size_t>(s) + 1];
    double own = 0, held = first > 0 ? layers[first].input.at(micro) : 0, extra = 0;
    for (size_t l = first; l < end; ++l) {
      own += static_cast<double>(layers[l].parameters);
      held += layers[l].held.at(micro);
      extra = std::max(extra, layers[l].backward_extra.at(micro));
    }
    MeshPrediction stage = p;
    add_states(stage, own, r);
    stage.activations = run.max_activations[static_cast<size_t>(s)] * held + extra;
    stage.start = kWordBytes * static_cast<double>(model.parameters);
    if (stage.peak() > worst) {
      worst = stage.peak();
      stage.worst_stage = s;
      stage.microbatches = p.microbatches;
      p = stage;
    }
  }
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  p.flags = fmt::format("--pipeline_parallel {} --microbatches {}{} --batch_size {}", stages,
                        p.microbatches,
                        q.schedule == PipelineSchedule::k1F1B
                            ? ""
                            : fmt::format(" --pipeline_schedule {}", name(q.schedule)),
                        p.batch);
  if (q.balance != PipelineBalance::kTime)
    p.flags += fmt::format(" --pipeline_balance {}", name(q.balance));
  return p;
}

MeshPrediction predict_tensor(const ModelMemory& model, const TensorMemory& m, const PlanRequest& r,
                              ShardMode shard) {
  const int n = r.world_size;
  DDPX_CHECK(m.ranks >= 2 && n % m.ranks == 0, ErrorKind::kUsage,
             "plan: --tensor_parallel {} does not divide {} GPUs", m.ranks, n);
  MeshPrediction p;
  p.tensor = m.ranks;
  p.data = n / m.ranks;
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
  }
  // The whole model and this rank's pieces, copied out of it, before the whole one's split
  // parameters are freed.
  p.start = kWordBytes * (static_cast<double>(model.parameters) +
                          static_cast<double>(m.split_parameters) / m.ranks);
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  p.flags = fmt::format(
      "--tensor_parallel {}{}{} --batch_size {}", m.ranks,
      m.sequence_parallel ? " --sequence_parallel" : "",
      shard == ShardMode::kNone ? std::string() : std::string(" --shard ") + name(shard), p.batch);
  return p;
}

}  // namespace ddpx::parallel
