// `ddpx plan`'s meshes (see plan_meshes.h).
#include "cli/plan_meshes.h"

#include <fmt/format.h>
#include <torch/nn/modules/batchnorm.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "core/error.h"
#include "parallel/tensor/parallelize.h"

namespace ddpx::cli {
namespace {

double in_gib(double bytes) { return bytes / (1LL << 30); }

// An error's text without the "plan: " every planner error starts with.
std::string reason(const Error& e) {
  const std::string text = e.what();
  return text.rfind("plan: ", 0) == 0 ? text.substr(6) : text;
}

// "2x1x2", "2x1x2 sp", "2x1x2 z3" (z1, z2, z3: --shard optimizer, gradients, full).
std::string mesh_name(const parallel::MeshPrediction& p) {
  return fmt::format(
      "{}x{}x{}{}{}", p.data, p.pipeline, p.tensor, p.sequence_parallel ? " sp" : "",
      p.shard == parallel::ShardMode::kNone ? "" : fmt::format(" z{}", static_cast<int>(p.shard)));
}

// The divisors of n above 1, ascending.
std::vector<int> splits_of(int n) {
  std::vector<int> out;
  for (int d = 2; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The T that split the model, without and with sequence parallelism; notes for the others.
std::array<std::vector<int>, 2> splitting_sizes(const MeshSearch& s, MeshResults& r) {
  const torch::nn::AnyModule& model = s.model;
  try {  // a model without a plan: one note, not one a T
    parallel::tensor::check_splittable(model, 1, s.model_name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUsage) throw;
    std::string text = reason(e);  // "--tensor_parallel 1: resnet50 has no ..."
    if (text.rfind("--tensor_parallel ", 0) == 0) text = text.substr(text.find(": ") + 2);
    r.notes.push_back(fmt::format("tensor parallel: {}", text));
    return {};
  }
  std::array<std::vector<int>, 2> sizes;
  for (bool sequence : {false, true}) {
    for (int t : splits_of(s.request.world_size)) {
      try {
        parallel::tensor::check_splittable(model, t, s.model_name, sequence);
        // A language model's sequence (and the probe's) split over the T ranks' tokens.
        if (sequence && s.probe.seq_len > 0 &&
            (s.scale.tokens % t != 0 || s.probe.seq_len % t != 0)) {
          r.notes.push_back(fmt::format(
              "tensor parallel {} sp: --seq_len {} is not a multiple of {}: sequence parallelism "
              "splits it over the ranks",
              t, s.scale.tokens, t));
          continue;
        }
        sizes[sequence].push_back(t);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUsage) throw;
        // Sequence parallel is for the ViTs only; the sizes are noted once, without it.
        if (!sequence) r.notes.push_back(fmt::format("tensor parallel {}: {}", t, reason(e)));
      }
    }
  }
  return sizes;
}

// Probes at the two smallest T that split the model (and the same with sequence parallelism),
// carried to every T (split_probe.h's at_tensor_size). Returns the carried probes of the T that
// leave GPUs for pipeline stages, with the split model's layers, for the 3-D meshes. Consumes
// s.model: rank 0's whole model in the first probe.
std::vector<parallel::TensorMemory> search_tensor(const parallel::ModelMemory& whole, MeshSearch& s,
                                                  MeshResults& r) {
  const auto splitting = splitting_sizes(s, r);
  const int n = s.request.world_size;
  // The two smallest sizes of each mode (the next size up, not the largest: T threads each hold
  // a rank's pieces and activations), both modes of a size probed on one set of thread ranks.
  std::map<int, std::vector<bool>> modes_at;
  for (bool sequence : {false, true}) {
    const std::vector<int>& sizes = splitting[sequence];
    for (size_t i = 0; i < sizes.size() && i < 2; ++i) modes_at[sizes[i]].push_back(sequence);
  }
  std::array<std::map<int, parallel::TensorMemory>, 2> probed;      // by mode, then T
  std::array<std::map<int, parallel::TensorMemory>, 2> probed_one;  // a deep LM's one-block copy
  for (const auto& [t, modes] : modes_at) {
    // The layers too where T leaves room for 2 stages or more.
    auto probes = parallel::measure_tensor_parallel(s.build, t, modes, s.probe, s.model_name,
                                                    s.checkpointing, /*layers=*/n / t >= 2,
                                                    std::exchange(s.model, torch::nn::AnyModule()));
    for (size_t k = 0; k < modes.size(); ++k) probed[modes[k]].emplace(t, std::move(probes[k]));
    if (!s.scale.active()) continue;
    auto one = parallel::measure_tensor_parallel(s.build_one, t, modes, s.probe, s.model_name,
                                                 s.checkpointing, /*layers=*/false);
    for (size_t k = 0; k < modes.size(); ++k) probed_one[modes[k]].emplace(t, std::move(one[k]));
  }
  std::vector<parallel::TensorMemory> for_pipelines;
  for (bool sequence : {false, true}) {
    const std::vector<int>& sizes = splitting[sequence];
    if (sizes.empty()) continue;
    const auto& smallest = probed[sequence].at(sizes.front());
    const auto& next = probed[sequence].at(sizes.size() == 1 ? sizes.front() : sizes[1]);
    for (int t : sizes) {
      auto at = parallel::at_tensor_size(smallest, next, t);
      if (s.scale.active()) {  // carried from the one- and two-block copies
        const auto& one = probed_one[sequence];
        at = parallel::scale_tensor(
            parallel::at_tensor_size(one.at(sizes.front()),
                                     one.at(sizes.size() == 1 ? sizes.front() : sizes[1]), t),
            at, s.scale);
      }
      if (!at.layers.empty()) for_pipelines.push_back(at);
      for (auto shard : {parallel::ShardMode::kNone, parallel::ShardMode::kOptimizer,
                         parallel::ShardMode::kGradients, parallel::ShardMode::kFull}) {
        // --shard needs replicas to shard over.
        if (shard == parallel::ShardMode::kNone || n > t)
          r.meshes.push_back(parallel::predict_tensor(whole, at, s.request, shard));
      }
    }
  }
  std::stable_sort(r.meshes.begin(), r.meshes.end(),
                   [](const auto& a, const auto& b) { return a.tensor < b.tensor; });
  return for_pipelines;
}

parallel::PipelineRequest pipeline_request(const MeshSearch& s, int stages, bool batch_norm) {
  parallel::PipelineRequest q;
  q.batch_norm = batch_norm;
  q.stages = stages;
  q.microbatches = s.microbatches;
  q.schedule = s.schedule;
  q.stages_per_rank = s.stages_per_rank;
  q.balance = s.balance;
  q.model_name = s.model_name;
  return q;
}

constexpr std::array<parallel::ShardMode, 4> kShardModes = {
    parallel::ShardMode::kNone, parallel::ShardMode::kOptimizer, parallel::ShardMode::kGradients,
    parallel::ShardMode::kFull};

void search_pipeline(const parallel::ModelMemory& whole, MeshSearch& s, MeshResults& r) {
  torch::nn::AnyModule& model = s.model;
  auto layers =
      s.layers ? std::move(s.layers) : parallel::measure_layers(model, s.probe, s.checkpointing);
  if (layers) *layers = parallel::scale_layers(*layers, s.scale);  // a deep LM's copy carried
  if (!layers) {
    r.notes.push_back(
        fmt::format("pipeline: {} is not sequential-shaped (docs/distributed.md "
                    "names the models that are)",
                    s.model_name));
    return;
  }
  bool batch_norm = false;  // ddpx's BatchNorm derives from libtorch's
  for (const auto& m : model.ptr()->modules()) {
    batch_norm = batch_norm || m->as<torch::nn::BatchNorm1dImpl>() != nullptr ||
                 m->as<torch::nn::BatchNorm2dImpl>() != nullptr ||
                 m->as<torch::nn::BatchNorm3dImpl>() != nullptr;
  }
  for (int p : splits_of(s.request.world_size)) {
    try {
      for (auto shard : kShardModes) {
        // --shard needs replicas to shard over.
        if (shard == parallel::ShardMode::kNone || s.request.world_size > p) {
          r.meshes.push_back(parallel::predict_pipeline(whole, *layers, s.request,
                                                        pipeline_request(s, p, batch_norm), shard));
        }
      }
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUsage) throw;
      r.notes.push_back(fmt::format("pipeline {}: {}", p, reason(e)));
    }
  }
}

// The 3-D meshes: P stages of the split model's layers, each over T ranks (the models with a
// tensor-parallel plan have no BatchNorm).
void search_pipeline_tensor(const parallel::ModelMemory& whole,
                            const std::vector<parallel::TensorMemory>& probes, const MeshSearch& s,
                            MeshResults& r) {
  for (const auto& at : probes) {
    for (int p : splits_of(s.request.world_size / at.ranks)) {
      try {
        for (auto shard : kShardModes) {
          if (shard == parallel::ShardMode::kNone || s.request.world_size > p * at.ranks) {
            r.meshes.push_back(parallel::predict_pipeline_tensor(
                whole, at, s.request, pipeline_request(s, p, false), shard));
          }
        }
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUsage) throw;
        r.notes.push_back(fmt::format("pipeline {} x tensor {}{}: {}", p, at.ranks,
                                      at.sequence_parallel ? " sp" : "", reason(e)));
      }
    }
  }
}

}  // namespace

MeshResults search_meshes(const parallel::ModelMemory& whole, MeshSearch search) {
  MeshResults results;
  if (search.request.world_size < 2) return results;
  if (search.model.is_empty()) search.model = search.build();
  // The one whole model: the pipeline's layer probes run on it, the tensor sizes are checked on
  // it, then the first tensor probe splits it as rank 0's (ViT-L/16 takes seconds to build).
  MeshResults pipeline;
  search_pipeline(whole, search, pipeline);
  for (auto& p : search.model.ptr()->parameters()) p.mutable_grad() = torch::Tensor();
  const auto split_layers = search_tensor(whole, search, results);
  results.meshes.insert(results.meshes.end(), pipeline.meshes.begin(), pipeline.meshes.end());
  results.notes.insert(results.notes.end(), pipeline.notes.begin(), pipeline.notes.end());
  search_pipeline_tensor(whole, split_layers, search, results);
  if (search.checkpointing.every > 0) {  // what was probed, in the flags to paste
    for (auto& mesh : results.meshes)
      mesh.flags += " --activation_checkpointing " + models::name(search.checkpointing);
  }
  return results;
}

const parallel::MeshPrediction* recommended_mesh(const MeshResults& results) {
  const parallel::MeshPrediction* best = nullptr;
  auto rank = [](const parallel::MeshPrediction& p) {
    // The least split, then no bubble, then the least communication (sequence parallelism's
    // all-gathers cost as much as the all-reduces they replace; each ZeRO stage adds some).
    return std::make_tuple(p.pipeline * p.tensor, p.pipeline > 1, p.sequence_parallel, p.shard);
  };
  for (const auto& p : results.meshes) {
    if (p.fits && (best == nullptr || rank(p) < rank(*best))) best = &p;
  }
  return best;
}

void print_meshes(const MeshResults& results, double usable) {
  if (!results.meshes.empty()) {
    fmt::print(
        "# meshes that split the model, data x pipeline x tensor (sp: --sequence_parallel; z1, "
        "z2, z3: the replicas' --shard optimizer, gradients, full); "
        "batch: --batch_size per replica, the same global batch; GiB on the rank that peaks; "
        "start: what the GPU holds as the plan starts (a pipeline: the rank's stages, built in "
        "host memory; else the whole model)\n");
    fmt::print("  {:<12} {:>6} {:>8} {:>8} {:>9} {:>9} {:>11} {:>7} {:>8}  {:<24} {}\n", "mesh",
               "batch", "params", "grads", "optimizer", "transient", "activations", "start", "peak",
               "fits", "flags");
    for (const auto& p : results.meshes) {
      const std::string fits =
          p.fits ? "yes" : fmt::format("no (over by {:.2f})", in_gib(p.peak() - usable));
      fmt::print(
          "  {:<12} {:>6} {:>8.2f} {:>8.2f} {:>9.2f} {:>9.2f} {:>11.2f} {:>7.2f} {:>8.2f}  "
          "{:<24} {}\n",
          mesh_name(p), p.batch, in_gib(p.params), in_gib(p.grads), in_gib(p.optimizer),
          in_gib(p.transient), in_gib(p.activations), in_gib(p.start), in_gib(p.peak()), fits,
          p.flags);
    }
  }
  for (const auto& note : results.notes) fmt::print("# not offered: {}\n", note);
}

std::string mesh_json(const parallel::MeshPrediction& p, double usable, bool recommended) {
  return fmt::format(
      "{{\"mesh\": \"{}x{}x{}\", \"data\": {}, \"pipeline\": {}, \"tensor\": {}, "
      "\"sequence_parallel\": {}, \"shard\": \"{}\", \"batch_size\": {}, \"microbatches\": {}, "
      "\"worst_stage\": {}, "
      "\"param_bytes\": {:.0f}, \"grad_bytes\": {:.0f}, \"optimizer_bytes\": {:.0f}, "
      "\"transient_bytes\": {:.0f}, \"activation_bytes\": {:.0f}, \"start_bytes\": {:.0f}, "
      "\"peak_bytes\": {:.0f}, \"usable_bytes\": {:.0f}, \"fits\": {}, \"recommended\": {}, "
      "\"flags\": \"{}\"}}",
      p.data, p.pipeline, p.tensor, p.data, p.pipeline, p.tensor,
      p.sequence_parallel ? "true" : "false", parallel::name(p.shard), p.batch, p.microbatches,
      p.worst_stage, p.params, p.grads, p.optimizer, p.transient, p.activations, p.start, p.peak(),
      usable, p.fits ? "true" : "false", recommended ? "true" : "false", p.flags);
}

}  // namespace ddpx::cli
