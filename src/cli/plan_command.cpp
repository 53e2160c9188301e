// `ddpx plan`: before launch, what one GPU will hold under DDP and each ZeRO stage, and under the
// meshes that split the model (pipeline stages, tensor pieces: plan_meshes.h), which fit and the
// flags to paste (parallel/planner/ has the arithmetic). Runs in this process, on the CPU: the
// model is built and probed here (tensor parallelism on ranks that are threads of it); no GPU
// and no launcher are needed. A language model (GPT, BERT) is probed on token windows as copies
// of one and two of its blocks at up to 64 tokens, carried to its depth and --seq_len
// (parallel/planner/depth_scale.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>

#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/model_data_flags.h"
#include "cli/parallel_flags.h"
#include "cli/plan_meshes.h"
#include "core/error.h"
#include "core/malloc_tuning.h"
#include "distributed/threads.h"
#include "models/checkpointed_model.h"
#include "models/zoo/registry.h"
#include "optim/amp.h"
#include "parallel/pipeline/pipeline_defaults.h"
#include "parallel/planner/depth_scale.h"
#include "parallel/planner/memory_plan.h"
#include "train/optim.h"

namespace ddpx::cli {
namespace {

struct PlanOptions {
  std::string model = "resnet50";
  int gpus = 1;
  std::string gpu_memory = "80G";
  std::string reserve = "1G";
  int64_t batch_size = 0;  // 0: 128 images, or a language model's 8 windows
  int64_t image_size = 0;  // 0: the model's default
  int64_t num_classes = 1000;
  int64_t seq_len = 0;     // a language model's; 0: its context
  int64_t vocab_size = 0;  // a language model's; 0: its tokenizer's
  bool bias = true;        // a GPT's biases (--no_bias: none)
  optim::Amp amp = optim::Amp::kOff;
  train::Optimizer optimizer = train::Optimizer::kSgd;
  bool optimizer_given = false;  // else a language model's recommended one (AdamW)
  double momentum = 0.9;
  int threads = 1;
  bool json = false;
  bool shard_only = false;
  // --activation_checkpointing and the pipeline's flags (the mesh sizes and --shard are searched)
  ParallelOptions parallelism;
};

// K: optimizer state bytes a parameter (fp32), as libtorch's optimizers keep it.
double optimizer_bytes(train::Optimizer optimizer, double momentum) {
  switch (optimizer) {
    case train::Optimizer::kSgd:
    case train::Optimizer::kLars:
      return momentum > 0 ? 4 : 0;
    case train::Optimizer::kAdam:
    case train::Optimizer::kAdamw:
    case train::Optimizer::kLamb:
      return 8;
  }
  return 8;
}

double gib(double bytes) { return bytes / (1LL << 30); }

std::string flag_for(parallel::ShardMode mode) {
  return mode == parallel::ShardMode::kNone ? "--shard none (plain DDP)"
                                            : fmt::format("--shard {}", parallel::name(mode));
}

// A language model's windows a GPU when --batch_size is not given (nanoGPT trains GPT-2 at 12
// windows of 1024 a GPU, accumulating the rest of its batch).
constexpr int64_t kLanguageBatch = 8;
constexpr int64_t kImageBatch = 128;
constexpr int64_t kLanguageProbeBatch = 4;  // the probe's windows (and twice as many)

void run_plan(PlanOptions o) {
  const bool language = models::is_language_model(models::find_model(o.model));
  if (o.batch_size == 0) o.batch_size = language ? kLanguageBatch : kImageBatch;
  // The probes build and free whole models, one a tensor-parallel thread rank: one arena for
  // all, so that freed models are reused rather than kept per thread or handed back to the
  // system and faulted in again (core/malloc_tuning.h).
  share_one_malloc_arena();
  DDPX_CHECK(o.gpus >= 1, ErrorKind::kUsage, "plan: --gpus must be at least 1, got {}", o.gpus);
  DDPX_CHECK(o.batch_size >= 1, ErrorKind::kUsage,
             "plan: --batch_size must be at least 1 (per GPU), got {}", o.batch_size);
  parallel::PlanRequest request;
  request.world_size = o.gpus;
  request.batch_size = o.batch_size;
  request.gpu_memory = parallel::parse_bytes(o.gpu_memory, "--gpu_memory");
  request.reserve = parallel::parse_bytes(o.reserve, "--reserve");
  DDPX_CHECK(request.gpu_memory > request.reserve, ErrorKind::kUsage,
             "plan: --gpu_memory {} leaves nothing after --reserve {}: give the GPU's memory "
             "(e.g. --gpu_memory 80G)",
             o.gpu_memory, o.reserve);
  request.optimizer_bytes_per_param = optimizer_bytes(o.optimizer, o.momentum);

  const models::ModelInfo& info = models::find_model(o.model);
  models::ModelConfig config;
  config.num_classes = o.num_classes;
  config.image_size = o.image_size > 0 ? o.image_size : info.default_image_size;
  models::check_bias(info, o.bias);
  config.bias = o.bias;
  // A language model: token windows of --seq_len over its vocabulary, probed as copies of one
  // and two of its blocks at up to kProbeTokens tokens and carried to the model (depth_scale.h).
  parallel::DepthScale scale;
  train::Optimizer optimizer = o.optimizer;
  if (language) {
    const int64_t context = info.default_image_size;
    const int64_t tokens = o.seq_len > 0 ? o.seq_len : context;
    DDPX_CHECK(o.seq_len >= 0 && tokens <= context, ErrorKind::kUsage,
               "plan: --seq_len {}: {} has position embeddings for {} tokens; give --seq_len {} "
               "or less",
               o.seq_len, o.model, context, context);
    DDPX_CHECK(o.vocab_size >= 0, ErrorKind::kUsage,
               "plan: --vocab_size must be positive (0: {}'s tokenizer's, {}), got {}", o.model,
               info.vocab_size, o.vocab_size);
    config.num_classes = o.vocab_size > 0 ? o.vocab_size : info.vocab_size;
    scale.blocks = info.blocks;
    scale.tokens = tokens;
    scale.probed_tokens = std::min(tokens, parallel::kProbeTokens);
    if (!o.optimizer_given) {
      optimizer = *parse_name(train::kOptimizerNames, info.recommendation.optimizer);
      request.optimizer_bytes_per_param = optimizer_bytes(optimizer, o.momentum);
    }
  } else {
    DDPX_CHECK(o.seq_len == 0 && o.vocab_size == 0, ErrorKind::kUsage,
               "plan: --seq_len and --vocab_size are a language model's; {} takes images "
               "(--image_size)",
               o.model);
  }
  DDPX_CHECK(o.threads >= 1, ErrorKind::kUsage, "plan: --threads must be at least 1, got {}",
             o.threads);
  dist::set_threads(o.threads);
  DDPX_CHECK(
      o.parallelism.microbatches >= 0, ErrorKind::kUsage,
      "plan: --microbatches must be >= 0 (0: 2 x --pipeline_parallel, as ddpx train), got {}",
      o.parallelism.microbatches);
  DDPX_CHECK(o.parallelism.stages_per_rank >= 0 &&
                 (o.parallelism.stages_per_rank == 0 ||
                  o.parallelism.pipeline_schedule == parallel::PipelineSchedule::kInterleaved),
             ErrorKind::kUsage,
             "plan: --stages_per_rank {} goes with --pipeline_schedule interleaved (0: 2)",
             o.parallelism.stages_per_rank);
  torch::manual_seed(0);
  const auto checkpointing =
      models::parse_activation_checkpointing(o.parallelism.activation_checkpointing);
  parallel::ProbeOptions probe;
  probe.image_size = config.image_size;
  probe.num_classes = config.num_classes;  // a language model's: its vocabulary
  // fp16 is probed as bf16 (the same bytes); auto as bf16, what the GPUs a plan is for take.
  probe.amp = o.amp != optim::Amp::kOff;
  probe.seq_len = scale.probed_tokens;
  // A language model's backward holds its tied embedding's V x C gradient buffers, a fixed
  // peak that hides the windows' bytes below a few hundred tokens: windows of 4 and 8.
  if (language) probe.batch_small = kLanguageProbeBatch;
  probe.vocab_divisible_by = o.parallelism.vocab_divisible_by;
  if (language) {  // the probe's two-block copy (one block for the first measure)
    config.layers = parallel::kProbedBlocks;
  }
  parallel::ModelMemory m;
  torch::nn::AnyModule model = models::create_model(o.model, config);  // the meshes' probes' too
  {
    // The probe runs the model as ddpx train would: its blocks recomputed in backward if asked.
    torch::nn::AnyModule checkpointed =
        models::with_activation_checkpointing(model, checkpointing, o.model);
    m = parallel::measure_model(checkpointed, probe);
  }
  models::ModelConfig one_block = config;
  one_block.layers = 1;
  std::optional<std::vector<parallel::LayerMemory>> layers;
  if (language) {
    torch::nn::AnyModule one = models::with_activation_checkpointing(
        models::create_model(o.model, one_block), checkpointing, o.model);
    m = parallel::scale_model(parallel::measure_model(one, probe), m, scale);
    // A wide model's backward holds its tied embedding's V x C gradient buffers, a fixed peak
    // that can hide the windows' bytes at the probe's few tokens: the bytes a window adds are at
    // least what its layers' forwards hold (each probed alone) and the most one layer's backward
    // adds, which that peak does not hide.
    layers = parallel::measure_layers(model, probe, checkpointing);  // the pipelines' too
    if (layers) {
      double held = 0, extra = 0;
      for (const auto& layer : parallel::scale_layers(*layers, scale)) {
        held += layer.held.per_sample;
        extra = std::max(extra, layer.backward_extra.per_sample);
      }
      m.activation_per_sample = std::max(m.activation_per_sample, held + extra);
    }
  }
  const parallel::MemoryPlan plan = parallel::plan_memory(m, request);
  MeshResults meshes;
  if (!o.shard_only) {
    MeshSearch search;
    search.model_name = o.model;
    search.build = [name = o.model, config] { return models::create_model(name, config); };
    search.model = std::move(model);
    search.layers = std::move(layers);
    search.probe = probe;
    search.checkpointing = checkpointing;
    search.request = request;
    search.microbatches = o.parallelism.microbatches;
    search.schedule = o.parallelism.pipeline_schedule;
    search.stages_per_rank = parallel::pipeline_stages_per_rank(o.parallelism.stages_per_rank,
                                                                o.parallelism.pipeline_schedule);
    search.balance = o.parallelism.pipeline_balance;
    search.scale = scale;
    search.build_one = [name = o.model, one_block] {
      return models::create_model(name, one_block);
    };
    meshes = search_meshes(m, std::move(search));
  }
  const parallel::MeshPrediction* mesh = plan.recommended ? nullptr : recommended_mesh(meshes);

  if (o.json) {
    for (const auto& p : plan.modes) {
      fmt::print(
          "{{\"model\": \"{}\", \"gpus\": {}, \"batch_size\": {}, \"image_size\": {}, "
          "\"seq_len\": {}, \"amp\": "
          "\"{}\", \"optimizer\": \"{}\", \"shard\": \"{}\", \"param_bytes\": {:.0f}, "
          "\"grad_bytes\": {:.0f}, \"optimizer_bytes\": {:.0f}, \"transient_bytes\": {:.0f}, "
          "\"backward_transient_bytes\": {:.0f}, \"activation_bytes\": {:.0f}, \"start_bytes\": "
          "{:.0f}, \"peak_bytes\": {:.0f}, \"usable_bytes\": {:.0f}, "
          "\"fits\": {}, \"recommended\": {}}}\n",
          o.model, o.gpus, o.batch_size, language ? 0 : config.image_size, scale.tokens,
          optim::name(o.amp), train::name(optimizer), parallel::name(p.mode), p.params, p.grads,
          p.optimizer, p.transient, p.backward_transient, p.activations, p.start, p.peak(),
          plan.usable, p.fits ? "true" : "false", plan.recommended == p.mode ? "true" : "false");
    }
    for (const auto& p : meshes.meshes) {
      fmt::print("{}\n", mesh_json(p, plan.usable, &p == mesh));
    }
    return;
  }
  const std::string input = language
                                ? fmt::format("sequences of {} tokens over a vocabulary of {}",
                                              scale.tokens, config.num_classes)
                                : fmt::format("{}x{} input", config.image_size, config.image_size);
  fmt::print(
      "# ddpx plan: {} ({:.2f} M parameters{}), {}, batch {} per GPU, {} GPUs of {:.1f} "
      "GiB ({:.1f} GiB usable after --reserve {}), {} (K = {:.0f} bytes a parameter), amp {}\n",
      o.model, m.parameters / 1e6, o.bias ? "" : ", no biases", input, o.batch_size, o.gpus,
      gib(request.gpu_memory), gib(plan.usable), o.reserve, train::name(optimizer),
      request.optimizer_bytes_per_param,
      o.amp == optim::Amp::kAuto
          ? "auto (planned as bf16: a GPU of compute capability 8.0 or newer takes it; fp32, "
            "more activation memory, on older ones)"
          : optim::name(o.amp));
  if (language) {
    fmt::print(
        "# activations measured on this CPU{} with {} and {} of its {} blocks at {} tokens, "
        "batches {} and {}, carried to {} blocks and {} tokens (linear in both): {:.1f} MiB + "
        "{:.2f} MiB a sequence\n",
        m.amp ? " under bf16 autocast" : "", 1, parallel::kProbedBlocks, scale.blocks,
        scale.probed_tokens, m.probe_batch_small, m.probe_batch_large, scale.blocks, scale.tokens,
        m.activation_fixed / 1048576.0, m.activation_per_sample / 1048576.0);
  } else {
    fmt::print(
        "# activations measured on this CPU{}: {:.1f} MiB at batch {}, {:.1f} MiB at batch {} -> "
        "{:.1f} MiB + {:.2f} MiB a sample\n",
        m.amp ? " under bf16 autocast" : "", m.probe_bytes_small / 1048576.0, m.probe_batch_small,
        m.probe_bytes_large / 1048576.0, m.probe_batch_large, m.activation_fixed / 1048576.0,
        m.activation_per_sample / 1048576.0);
  }
  fmt::print(
      "# GiB per GPU; transient: communication buffers and gathered units (ZeRO-3); peak: the "
      "states plus the larger of transient and activations (ZeRO-2/3: plus a unit's gradients "
      "and their reduce-scatter input, alive as backward starts)\n");
  fmt::print("  {:<10} {:>8} {:>8} {:>9} {:>9} {:>11} {:>8}  {}\n", "shard", "params", "grads",
             "optimizer", "transient", "activations", "peak", "fits");
  for (const auto& p : plan.modes) {
    fmt::print("  {:<10} {:>8.2f} {:>8.2f} {:>9.2f} {:>9.2f} {:>11.2f} {:>8.2f}  {}\n",
               parallel::name(p.mode), gib(p.params), gib(p.grads), gib(p.optimizer),
               gib(p.transient), gib(p.activations), gib(p.peak()),
               p.fits ? "yes" : fmt::format("no (over by {:.2f})", gib(p.peak() - plan.usable)));
  }
  print_meshes(meshes, plan.usable);
  if (plan.recommended) {
    fmt::print("recommendation: {}\n", flag_for(*plan.recommended));
    return;
  }
  if (mesh != nullptr) {
    fmt::print("recommendation: {} (no --shard mode fits)\n", mesh->flags);
    return;
  }
  std::string advice;
  if (plan.full_max_batch > 0) {
    advice += fmt::format("--shard full with --batch_size {} (or accumulate: --accumulation_steps)",
                          plan.full_max_batch);
  }
  if (plan.full_min_world > 0) {
    advice += fmt::format("{}--shard full on {} GPUs", advice.empty() ? "" : "; or ",
                          plan.full_min_world);
  }
  if (plan.modes[0].start > plan.usable) {
    advice = fmt::format(
        "the whole model ({:.2f} GiB of fp32 parameters) does not fit one GPU, and every plan "
        "but a pipeline puts it whole on the GPU before splitting it; use more GPUs for "
        "more pipeline stages, or GPUs with more memory",
        gib(plan.modes[0].start));
  }
  fmt::print("recommendation: nothing fits {} GPUs at batch {}{}{}\n", o.gpus, o.batch_size,
             advice.empty() ? "" : ": ",
             advice.empty() ? "; use a smaller model or input" : advice);
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "plan",
      "before launch: the memory one GPU holds under DDP, each ZeRO stage (--shard) and the "
      "pipeline and tensor-parallel meshes, which fit, and the flags to use (measured on this "
      "CPU; no GPU needed)");
  cmd->option_defaults()->always_capture_default();
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("--model", o->model, "model name (ddpx models)");
  cmd->add_option("--gpus", o->gpus, "GPUs (ranks) the job will have, all nodes together");
  cmd->add_option("--gpu_memory", o->gpu_memory, "memory of one GPU: 80G, 40GiB, 24576M");
  cmd->add_option("--reserve", o->reserve,
                  "memory of a GPU that is not tensors (CUDA context, library workspaces, "
                  "allocator rounding)");
  cmd->add_option("--batch_size", o->batch_size,
                  "batch per GPU, as ddpx train's --batch_size (0: 128 images, or 8 windows of a "
                  "language model)");
  cmd->add_option("--image_size", o->image_size, "input height = width (0: the model's own)");
  cmd->add_option("--num_classes", o->num_classes, "classifier outputs");
  add_token_flags(cmd, o->seq_len, o->vocab_size);
  add_bias_flag(cmd, o->bias);
  add_choice(cmd, "--amp", o->amp, optim::kAmpNames,
             "off | bf16 | fp16 (probed as bf16) | auto (bf16 where the GPU computes it: planned "
             "as bf16)");
  add_choice(cmd, "--optimizer", o->optimizer, train::kOptimizerNames,
             "sgd | adam | adamw | lars | lamb: its state per parameter (a language model's "
             "default: its recipe's, adamw)")
      ->each([o](const std::string&) { o->optimizer_given = true; });
  cmd->add_option("--momentum", o->momentum, "SGD and LARS momentum (0: no momentum state)");
  cmd->add_option("--threads", o->threads,
                  "intra-op threads of the probe (1: no per-thread CPU buffers, as on a GPU)");
  cmd->add_flag("--shard_only", o->shard_only,
                "weigh only --shard's modes, not the meshes that split the model (no "
                "pipeline or tensor-parallel probes)");
  add_parallel_flags(cmd, o->parallelism, kPipelineFlags | kCheckpointingFlag | kVocabFlag);
  cmd->add_flag("--json", o->json,
                "one JSON object per shard mode, then one per mesh (with \"mesh\": \"DxPxT\")");
  cmd->callback([o, &exit_code] {
    run_plan(*o);
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
