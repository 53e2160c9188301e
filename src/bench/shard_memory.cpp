// Model-state memory per rank under a parallel plan (see shard_memory.h).
#include "bench/shard_memory.h"

#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/proc_memory.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/peer_memory.h"
#include "distributed/threads.h"
#include "models/activation_checkpoint.h"
#include "models/checkpointed_model.h"
#include "models/zoo/registry.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/pipeline_defaults.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/planner/tensor_bytes.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/sharded_plan.h"
#include "parallel/tensor/tensor_parallel_plan.h"

namespace ddpx::bench {
namespace {

enum Field { kParams, kGrads, kOptimizer, kFormula, kPeak, kTensorPeak, kActivations, kCount };

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// Allocated bytes of the parameters' storages and of their gradients.
void count_model(torch::nn::Module& module, int64_t& params, int64_t& grads) {
  for (const auto& p : module.parameters()) {
    params += static_cast<int64_t>(p.storage().nbytes());
    grads += bytes_of(p.grad());
  }
}

// `resident`: ZeRO-1/2's shards are rows of the parameters (shard_unit.h), no copy of their own.
double formula(parallel::ShardMode shard, double psi, double k, int n, bool resident) {
  const double copy = resident ? 0 : 4;  // the fp32 shards beside the parameters
  switch (shard) {
    case parallel::ShardMode::kNone:
      return (4 + 4 + k) * psi;
    case parallel::ShardMode::kOptimizer:
      return 8 * psi + (copy + 4 + k) * psi / n;
    case parallel::ShardMode::kGradients:
      return 4 * psi + (copy + 4 + k) * psi / n;
    case parallel::ShardMode::kFull:
      return (4 + 4 + k) * psi / n;
  }
  return 0;
}

const char* formula_text(parallel::ShardMode shard, bool resident) {
  switch (shard) {
    case parallel::ShardMode::kNone:
      return "(4+4+K)Psi";
    case parallel::ShardMode::kOptimizer:
      return resident ? "8Psi+(4+K)Psi/N (the shards: rows of the parameters)" : "8Psi+(8+K)Psi/N";
    case parallel::ShardMode::kGradients:
      return resident ? "4Psi+(4+K)Psi/N (the shards: rows of the parameters)" : "4Psi+(8+K)Psi/N";
    case parallel::ShardMode::kFull:
      return "(8+K)Psi/N";
  }
  return "";
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// "--shard full", "--pipeline_parallel 2", "--tensor_parallel 2": the plan measured.
std::string plan_flag(const ShardMemoryOptions& o) {
  const std::string shard = o.shard == parallel::ShardMode::kNone
                                ? std::string()
                                : fmt::format(" --shard {}", parallel::name(o.shard));
  if (o.pipeline_parallel > 1 && o.tensor_parallel > 1) {
    return fmt::format("--pipeline_parallel {} --tensor_parallel {}{}", o.pipeline_parallel,
                       o.tensor_parallel, shard);
  }
  if (o.pipeline_parallel > 1)
    return fmt::format("--pipeline_parallel {}{}", o.pipeline_parallel, shard);
  if (o.tensor_parallel > 1) return fmt::format("--tensor_parallel {}{}", o.tensor_parallel, shard);
  return fmt::format("--shard {}", parallel::name(o.shard));
}

// Every storage the model's parameters and the plan's (pieces) still hold, once each; the
// gradients of those with one.
void count_held(torch::nn::Module& module, const std::vector<torch::Tensor>& mine, int64_t& params,
                int64_t& grads) {
  std::set<const void*> storages, tensors;
  auto all = module.parameters();
  all.insert(all.end(), mine.begin(), mine.end());
  for (const auto& p : all) {
    if (storages.insert(p.storage().unsafeGetStorageImpl()).second)
      params += static_cast<int64_t>(p.storage().nbytes());
    if (tensors.insert(p.unsafeGetTensorImpl()).second) grads += bytes_of(p.grad());
  }
}

}  // namespace

void run_shard_memory(const ShardMemoryOptions& o) {
  DDPX_CHECK(o.batch_size > 0, ErrorKind::kUsage, "--batch_size must be positive, got {}",
             o.batch_size);
  dist::InitOptions init;
  init.device = dist::DeviceChoice::kCpu;
  init.transport = o.transport;
  auto context = dist::init(init);
  log::set_rank(context->rank());
  dist::set_threads(o.threads > 0 ? o.threads : dist::default_threads());
  const int n = context->world_size();
  const bool splits = o.pipeline_parallel > 1 || o.tensor_parallel > 1;
  DDPX_CHECK((o.shard == parallel::ShardMode::kNone && !splits) || context->distributed(),
             ErrorKind::kUsage,
             "bench memory {} splits across ranks: run it as `ddpx run 2 -- bench memory {}`",
             plan_flag(o), plan_flag(o));

  // The ranks' layout, refused as ddpx train refuses it before anything communicates.
  const parallel::Mesh mesh =
      parallel::Mesh::build(parallel::MeshSizes{o.pipeline_parallel, o.tensor_parallel, 1,
                                                o.shard != parallel::ShardMode::kNone},
                            n);

  const models::ModelInfo& info = models::find_model(o.model);
  models::ModelConfig config;
  config.num_classes = o.num_classes;
  config.image_size = o.image_size > 0 ? o.image_size : info.default_image_size;
  config.bias = o.bias;
  // A language model: windows of `tokens` token ids over its vocabulary.
  const bool language = models::is_language_model(info);
  const int64_t tokens = !language ? 0 : o.seq_len > 0 ? o.seq_len : info.default_image_size;
  if (language) config.num_classes = o.vocab_size > 0 ? o.vocab_size : info.vocab_size;
  const auto checkpointing = models::parse_activation_checkpointing(o.activation_checkpointing);
  const double baseline = proc_status_mib("VmHWM");
  parallel::CpuTensorBytes tensor_bytes;  // what `ddpx plan` predicts: tensors, not the process
  const int64_t tensor_baseline = tensor_bytes.current();
  // Tensors in the memory a group's ranks publish to each other (the shared-memory transport's
  // arenas: gradient buckets, a sharded plan's shards and collective buffers) are not the
  // allocator's: counted with it.
  dist::count_published_with(&parallel::CpuTensorBytes::count_outside);
  torch::manual_seed(1);
  torch::nn::AnyModule model = models::create_model(o.model, config);
  model.ptr()->train();
  int64_t psi = 0;
  for (const auto& p : model.ptr()->parameters()) psi += p.numel();

  parallel::OptimizerFactory make =
      [&](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    if (o.adamw) {
      return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
    }
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.01).momentum(0.9));
  };
  std::unique_ptr<parallel::Plan> plan;
  parallel::ShardedPlan* sharded = nullptr;
  parallel::DataParallelPlan* data = nullptr;
  torch::optim::Optimizer* split_optimizer = nullptr;  // a pipeline's or tensor-parallel plan's
  const std::vector<parallel::ShardUnit>* units = nullptr;  // whichever plan shards
  std::optional<parallel::PipelineOptions> pipeline;
  if (o.pipeline_parallel > 1) {
    pipeline.emplace();
    pipeline->stages = o.pipeline_parallel;
    // ddpx train's micro-batches for this replica batch, whose memory this measures.
    pipeline->microbatches =
        parallel::pipeline_microbatches(o.microbatches, o.pipeline_parallel, o.batch_size);
    DDPX_CHECK(o.batch_size % pipeline->microbatches == 0, ErrorKind::kUsage,
               "bench memory: --batch_size {} does not split into {} micro-batches", o.batch_size,
               pipeline->microbatches);
    pipeline->balance = o.pipeline_balance;
    pipeline->schedule = o.pipeline_schedule;
    if (o.pipeline_schedule == parallel::PipelineSchedule::kInterleaved)
      pipeline->stages_per_rank =
          parallel::pipeline_stages_per_rank(o.stages_per_rank, o.pipeline_schedule);
    pipeline->sample_shape = {3, config.image_size, config.image_size};  // as ddpx train times
    if (language) {
      pipeline->sample_shape = {tokens};
      pipeline->sample_dtype = torch::kLong;
    }
    pipeline->checkpointing = checkpointing;
    pipeline->micro_batch = o.batch_size / pipeline->microbatches;
    pipeline->model_name = o.model;
    pipeline->shard = o.shard;
    if (o.tensor_parallel <= 1) pipeline->mesh = mesh;  // else the tensor plan's slice of it
  }
  if (pipeline && o.tensor_parallel <= 1) {
    auto p = std::make_unique<parallel::PipelinePlan>(model, *context, make, *pipeline);
    split_optimizer = p->optimizer();
    if (!p->units().empty()) units = &p->units();  // the stages sharded over their replicas
    plan = std::move(p);
  } else if (o.tensor_parallel > 1) {
    parallel::TensorParallelOptions options;
    options.size = o.tensor_parallel;
    options.sequence_parallel = o.sequence_parallel;
    options.vocab_divisible_by = o.vocab_divisible_by;
    options.model_name = o.model;
    options.shard = o.shard;
    options.checkpointing = checkpointing;
    options.pipeline = pipeline;  // the 3-D mesh: a pipeline of tensor-parallel stages
    options.mesh = mesh;
    auto p = std::make_unique<parallel::TensorParallelPlan>(model, *context, make, options);
    split_optimizer = &p->optimizer();
    sharded = p->sharded();  // the replicas' sharded plan over the pieces, with --shard
    if (sharded != nullptr) units = &sharded->units();
    if (p->pipeline() != nullptr && !p->pipeline()->units().empty())
      units = &p->pipeline()->units();  // the 3-D mesh's stages sharded over their replicas
    plan = std::move(p);
  } else if (o.shard == parallel::ShardMode::kNone) {
    model = models::with_activation_checkpointing(model, checkpointing, o.model);
    auto p = std::make_unique<parallel::DataParallelPlan>(model, *context, make,
                                                          parallel::DataParallelOptions{});
    data = p.get();
    plan = std::move(p);
  } else {
    parallel::ShardedOptions options;
    options.mode = o.shard;
    model = models::with_activation_checkpointing(model, checkpointing, o.model);
    auto p = std::make_unique<parallel::ShardedPlan>(model, *context, make, options);
    sharded = p.get();
    units = &sharded->units();
    plan = std::move(p);
  }
  const std::string described = plan->describe();

  const auto x = language ? torch::randint(config.num_classes, {o.batch_size, tokens}, torch::kLong)
                          : torch::randn({o.batch_size, 3, config.image_size, config.image_size});
  const auto y = torch::randint(
      config.num_classes,
      language ? std::vector<int64_t>{o.batch_size, tokens} : std::vector<int64_t>{o.batch_size},
      torch::kLong);
  parallel::MicroBatch mb;
  mb.input = x;
  mb.target = y;
  mb.loss = [](const torch::Tensor& out, const torch::Tensor& target) {
    // The class dimension last: (B, K), or a language model's (B, T, V) against (B, T).
    return torch::nn::functional::cross_entropy(out.flatten(0, -2), target.flatten());
  };
  // The third forward's activations: the tensor bytes it added, as each backward starts (a
  // pipeline's micro-batches: the most held at once), less the gradients that the backwards
  // before it allocated (a pipeline's earlier micro-batches'). The gradients are counted from
  // the first backward's start: where they are views of buckets allocated once (a reducer's),
  // they are in place by then and no backward allocates them.
  const auto grad_bytes = [&] {
    int64_t n = 0;
    for (const auto& p : plan->parameters()) n += p.grad().defined() ? p.grad().nbytes() : 0;
    return n;
  };
  bool measuring = false, first_backward = true;
  int64_t forward_start = 0, grads_start = 0, activations = 0;
  mb.in_backward_context = [&](const std::function<void()>& backward) {
    if (measuring) {
      if (first_backward) grads_start = grad_bytes();
      first_backward = false;
      activations = std::max(activations,
                             tensor_bytes.current() - forward_start - (grad_bytes() - grads_start));
    }
    backward();
  };
  for (int s = 0; s < 3; ++s) {
    measuring = s == 2;
    forward_start = tensor_bytes.current();
    plan->forward_backward(mb, /*sync=*/true);
    if (s == 2) break;  // measured after the third backward: gradients and state all present
    plan->step();
    plan->zero_grad();
  }

  std::vector<int64_t> mine(kCount, 0);
  const bool resident = units != nullptr && !units->empty() && units->front().resident();
  if (units != nullptr) {
    std::set<const void*> storages;  // a resident unit's parameters share one
    for (const auto& unit : *units) {
      for (const auto& p : unit.params()) {
        if (storages.insert(p.storage().unsafeGetStorageImpl()).second)
          mine[kParams] += static_cast<int64_t>(p.storage().nbytes());
        mine[kGrads] += bytes_of(p.grad());
      }
      for (const auto& s : unit.shards()) {
        if (!unit.resident()) mine[kParams] += bytes_of(s);  // else rows of the parameters
        mine[kGrads] += bytes_of(s.grad());
      }
    }
    mine[kOptimizer] = parallel::optimizer_state_bytes(sharded != nullptr ? sharded->optimizer()
                                                                          : *split_optimizer);
  } else if (splits) {
    count_held(*model.ptr(), plan->parameters(), mine[kParams], mine[kGrads]);
    if (split_optimizer) mine[kOptimizer] = parallel::optimizer_state_bytes(*split_optimizer);
  } else {
    count_model(*model.ptr(), mine[kParams], mine[kGrads]);
    mine[kOptimizer] = parallel::optimizer_state_bytes(data->optimizer());
  }
  const double k = o.adamw ? 8 : 4;
  int64_t own = 0;  // Psi_r: this rank's own parameters under a pipeline or tensor parallelism
  if (splits && units != nullptr) {  // pieces or stages, whole (the plan's are shards)
    for (const auto& unit : *units)
      for (const auto& p : unit.params()) own += p.numel();
  } else {
    for (const auto& p : plan->parameters()) own += p.numel();
  }
  // The replicas shard Psi_r over the N/T ranks of a tensor rank, or the N/P of a stage.
  const int replicas = mesh.data_size();
  mine[kFormula] = static_cast<int64_t>(
      !splits            ? formula(o.shard, static_cast<double>(psi), k, n, resident)
      : units != nullptr ? formula(o.shard, static_cast<double>(own), k, replicas, resident)
                         : (4 + 4 + k) * static_cast<double>(own));
  plan->step();
  mine[kPeak] = static_cast<int64_t>((proc_status_mib("VmHWM") - baseline) * (1 << 20));
  mine[kTensorPeak] = tensor_bytes.peak() - tensor_baseline;
  mine[kActivations] = activations;

  // Every rank's figures to rank 0.
  auto row = torch::tensor(mine, torch::kLong);
  std::vector<torch::Tensor> rows{row};
  if (context->distributed()) rows = dist::all_gather(*context->process_group(), row);
  if (context->rank() != 0) return;
  if (!o.json) {
    fmt::print(
        "# ddpx bench memory {}: {} ({:.2f} M parameters{}), {}, batch {} "
        "per rank, {}, {} ranks\n",
        plan_flag(o), o.model, psi / 1e6, o.bias ? "" : ", no biases",
        language ? fmt::format("{} tokens a sequence", tokens)
                 : fmt::format("{}x{} input", config.image_size, config.image_size),
        o.batch_size, o.adamw ? "AdamW (K = 8)" : "SGD with momentum (K = 4)", n);
    fmt::print("# {}\n", described);
    fmt::print(
        "# model states after backward, MiB; formula {} (fp32); peak: resident memory "
        "over the start's; tensors: the most CPU tensor bytes alive at once (`ddpx plan`'s peak); "
        "activations: the tensor bytes a forward adds, held when its backward starts\n",
        !splits ? formula_text(o.shard, resident)
        : units != nullptr  // sharded pieces or stages (a pipeline of one replica shards none)
            ? formula_text(o.shard, resident) +
                  std::string(" over Psi_r, this rank's own parameters, and "
                              "N the replicas")
            : "(8+K)Psi_r, Psi_r: this rank's own parameters");
    fmt::print("# {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>11}\n", "rank",
               "params", "grads", "optimizer", "states", "formula", "vs", "peak", "tensors",
               "activations");
  }
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    auto v = rows[r].accessor<int64_t, 1>();
    const int64_t states = v[kParams] + v[kGrads] + v[kOptimizer];
    if (o.json) {
      fmt::print(
          "{{\"rank\": {}, \"world_size\": {}, \"shard\": \"{}\", \"model\": \"{}\", "
          "\"batch_size\": {}, \"parameters\": {}, \"param_bytes\": {}, \"grad_bytes\": {}, "
          "\"optimizer_bytes\": {}, \"formula_bytes\": {}, \"peak_bytes\": {}, "
          "\"tensor_peak_bytes\": {}, \"activation_bytes\": {}, \"pipeline_parallel\": {}, "
          "\"tensor_parallel\": {}, \"sequence_parallel\": {}, \"seq_len\": {}}}\n",
          r, n, parallel::name(o.shard), o.model, o.batch_size, psi, v[kParams], v[kGrads],
          v[kOptimizer], v[kFormula], v[kPeak], v[kTensorPeak], v[kActivations],
          o.pipeline_parallel, o.tensor_parallel, o.sequence_parallel, tokens);
    } else {
      fmt::print(
          "  {:>4} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>+7.1f}% {:>10.1f} "
          "{:>10.1f} {:>11.1f}\n",
          r, mib(v[kParams]), mib(v[kGrads]), mib(v[kOptimizer]), mib(states), mib(v[kFormula]),
          100.0 * (states - v[kFormula]) / std::max<int64_t>(v[kFormula], 1), mib(v[kPeak]),
          mib(v[kTensorPeak]), mib(v[kActivations]));
    }
  }
}

}  // namespace ddpx::bench
