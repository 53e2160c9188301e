// `bench train --loop trainer`: ddpx train's own loop, timed as the PyTorch peer times its
// loop (see train_bench.h).
#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/train_bench.h"
#include "core/error.h"
#include "core/log.h"
#include "core/proc_memory.h"
#include "core/timer.h"
#include "distributed/context.h"
#include "distributed/device.h"
#include "distributed/peak_flops.h"
#include "distributed/world.h"
#include "models/flops.h"
#include "models/gpt.h"
#include "models/zoo/registry.h"
#include "parallel/mesh.h"
#include "parallel/plan.h"
#include "train/trainer.h"

namespace ddpx::bench {
namespace {

// The peer's loop: SGD (lr 0.01, momentum 0.9, weight decay 5e-4, constant), cross-entropy,
// random crop and flip unless --no_augment. Synthetic data holds every step of the run in one
// epoch on every rank, as the peer's does: no epoch ends inside the window (a real run's
// epochs are thousands of steps long). A language model trains as the shakespeare-char recipe
// (train/recipes.cpp) and bench/pytorch_gpt.py do, at a constant learning rate: AdamW 1e-3 with
// weight decay 0.1 on the matrices, gradients clipped at 1, on windows of --seq_len tokens.
train::TrainOptions trainer_options(const TrainBenchOptions& b, int64_t steps_in_run) {
  const bool language = b.data == data::DatasetId::kTokens;
  train::TrainOptions o;
  o.model = b.model;
  o.stem = b.stem;
  o.dataset = b.data;
  o.data_dir = b.data_dir;
  o.image_size = b.data == data::DatasetId::kSynthetic || language ? 0 : b.image_size;
  o.seq_len = b.seq_len;
  o.vocab_size = b.vocab_size;
  o.bias = b.bias;
  o.synthetic_image = b.image_size;
  o.synthetic_classes = b.num_classes;
  o.synthetic_size = b.batch_size * dist::detect_world().world_size * (steps_in_run + 1);
  o.random_crop = o.horizontal_flip = b.augment && !language;
  if (language) {
    o.optimizer = train::Optimizer::kAdamw;
    o.learning_rate = 1e-3;
    o.weight_decay = 0.1;
    o.clip_grad_norm = 1.0;
  } else {
    o.optimizer = train::Optimizer::kSgd;
    o.learning_rate = 0.01;
    o.momentum = 0.9;
    o.weight_decay = 5e-4;
  }
  o.lr_schedule = train::Schedule::kConstant;
  o.batch_size = b.batch_size;
  o.num_epochs = int64_t{1} << 40;  // the step hook ends the run
  o.log_every = int64_t{1} << 40;   // no evaluation
  o.device = b.device;
  o.amp = b.amp;
  o.channels_last = b.channels_last;
  o.threads = b.threads;
  o.loader_workers = b.workers;
  o.transport = b.transport;
  o.comm_hook = b.comm_hook;
  o.powersgd_rank = b.powersgd_rank;
  o.powersgd_start_iter = b.powersgd_start_iter;
  o.shard = b.shard;
  o.shard_units = b.shard_units;
  o.shard_gather_dtype = b.shard_gather_dtype;
  o.pipeline_parallel = b.pipeline_parallel;
  o.microbatches = b.microbatches;
  o.pipeline_schedule = b.pipeline_schedule;
  o.stages_per_rank = b.stages_per_rank;
  o.pipeline_balance = b.pipeline_balance;
  o.tensor_parallel = b.tensor_parallel;
  o.deterministic = b.deterministic;
  o.deterministic_atom = b.deterministic_atom;
  o.sequence_parallel = b.sequence_parallel;
  o.vocab_divisible_by = b.vocab_divisible_by;
  o.activation_checkpointing = b.activation_checkpointing;
  o.progress = false;
  return o;
}

// The window the trainer reads: --seq_len, else the model's context (train/data_setup.cpp).
int64_t options_seq_len(const TrainBenchOptions& b) {
  return b.seq_len > 0 ? b.seq_len : models::find_model(b.model).default_image_size;
}

}  // namespace

TrainBenchResult run_train_loop_bench(const TrainBenchOptions& b) {
  DDPX_CHECK(b.workers >= 1, ErrorKind::kUsage,
             "--workers {}: the loader needs at least one thread per rank", b.workers);
  DDPX_CHECK(b.fused_step, ErrorKind::kUsage,
             "--optimizer_step libtorch is timed by the phases loop only; add --loop phases");
  const int64_t first = std::max<int64_t>(b.warmup, 1);  // steps before the window
  const train::TrainOptions options = trainer_options(b, first + b.steps);
  Stopwatch window;
  double seconds = 0, startup_s = 0;
  int world_size = 1, rank = 0;
  std::string backend;
  torch::Device device = torch::kCPU;
  // After every optimizer step of ddpx train's loop: the window's ends, as the peer's.
  std::string plan_summary;
  auto after_step = [&](int64_t step, dist::Context& context, parallel::Plan& plan) {
    if (step == 1) startup_s = job_age_seconds();
    if (step == first) {
      plan.epoch_summary();  // what the plan counted before the window is not the window's
      context.barrier();
      dist::synchronize(context.device());
      if (context.device().is_cuda()) at::accelerator::resetPeakStats(context.device().index());
      window.reset();
    }
    if (step < first + b.steps) return false;
    dist::synchronize(context.device());
    seconds = window.seconds();
    plan_summary = plan.epoch_summary();
    world_size = context.world_size();
    rank = context.rank();
    backend = context.backend();
    device = context.device();
    return true;
  };
  train::run_training(options, after_step);
  DDPX_CHECK(seconds > 0, ErrorKind::kInternal,
             "bench train: the training loop ended before its timed window");
  // What --amp auto became (the trainer decided the same and printed why in its header).
  const optim::Amp amp = optim::resolve_amp(b.amp, dist::bf16_support(device)).amp;

  TrainBenchResult r;
  r.sync =
      "window ends (a barrier and a device sync before the first timed step, a device sync "
      "after the last)";
  // A pipeline's P ranks train one replica's batch, as do the T ranks that split its layers.
  const int replicas = parallel::Mesh::build(parallel::MeshSizes{std::max(b.pipeline_parallel, 1),
                                                                 std::max(b.tensor_parallel, 1)},
                                             world_size)
                           .data_size();
  // A language model's sample is a window of seq_len tokens, each a prediction: count tokens.
  const bool language = b.data == data::DatasetId::kTokens;
  const int64_t seq_len = language ? options_seq_len(b) : 1;
  const char* unit = language ? "tokens" : "images";
  const char* sample = language ? "token" : "image";
  r.images_per_sec = static_cast<double>(b.steps * b.batch_size * seq_len * replicas) / seconds;
  r.step_ms = 1e3 * seconds / static_cast<double>(b.steps);
  r.startup_s = startup_s;
  models::ModelConfig config;
  config.num_classes = b.num_classes;
  config.image_size = b.image_size;
  config.stem = b.stem;
  config.bias = b.bias;
  auto model = models::create_model(b.model, config);
  // A GPT's by nanoGPT's and llm.c's formula (a third of training's 6N + 12·L·C·T a token): the
  // counter sees no multiplies inside a fused attention kernel.
  r.forward_gflop =
      language
          ? models::gpt_training_flops_per_token(model.get<models::Gpt>()->options(), seq_len) / 3 /
                1e9
          : models::count_forward_flops(model, torch::zeros({1, 3, b.image_size, b.image_size})) /
                1e9;
  std::string peak_note;
  if (device.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    r.peak_memory_gib =
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
            .peak /
        1073741824.0;
    if (auto peak = dist::device_peak(device, amp)) {
      r.mfu = 3.0 * r.forward_gflop * 1e9 * (r.images_per_sec / world_size) /
              (peak->peak.tflops * 1e12);
      peak_note = fmt::format(" of the {} {} peak", peak->peak.label, peak->dtype);
    }
  }
  log::out(
      "# ddpx bench train: {} {}, batch {} per rank, {} rank(s) over {}, data "
      "{}, loop: ddpx train's (train/trainer.cpp), {} steps timed after {}",
      b.model,
      language
          ? fmt::format("({} tokens a window, vocabulary {}{})", seq_len, b.num_classes,
                        b.bias ? "" : ", no biases")
          : fmt::format("({} stem), {}x{} input", models::name(b.stem), b.image_size, b.image_size),
      b.batch_size, world_size, backend, data::name(b.data), b.steps, first);
  log::out("{}/s (all ranks): {:.1f} | sync: {} | loader: {} worker thread(s) per rank", unit,
           r.images_per_sec, r.sync, b.workers);
  log::out("per step: {:.1f} ms | model: {:.{}f} {} forward per {}{}{}", r.step_ms,
           language ? r.forward_gflop * 1e3 : r.forward_gflop, language ? 3 : 2,
           language ? "MFLOP" : "GFLOP", sample,
           language ? " (training 3x: 6N + 12·L·C·T, nanoGPT's and llm.c's count)" : "",
           r.mfu ? fmt::format(" | MFU {:.1f}%{}", 100 * *r.mfu, peak_note) : "");
  if (r.peak_memory_gib) log::out("peak GPU memory (rank 0): {:.2f} GiB", *r.peak_memory_gib);
  r.plan_summary = plan_summary;
  if (!plan_summary.empty()) log::out("over the timed steps, {}", plan_summary);
  if (!b.json.empty() && rank == 0) {
    nlohmann::json line = {{"model", b.model},
                           {"loop", "trainer"},
                           {"sync", "window ends"},
                           {"loader_workers", b.workers},
                           {"world_size", world_size},
                           {"batch_size", b.batch_size},
                           {"threads", b.threads},
                           {language ? "tokens_per_sec" : "images_per_sec", r.images_per_sec},
                           {"step_ms", r.step_ms},
                           {"startup_s", r.startup_s},
                           {"backend", backend},
                           {"device", dist::device_name(device)},
                           {"amp", optim::name(amp)},
                           {"channels_last", b.channels_last},
                           {"forward_gflop", r.forward_gflop}};
    if (r.mfu) line["mfu"] = *r.mfu;
    if (r.peak_memory_gib) line["peak_memory_gib"] = *r.peak_memory_gib;
    line["peak_rss_mib"] = proc_status_mib("VmHWM");  // rank 0's process, resident
    line["shard"] = parallel::name(b.shard);
    line["pipeline_parallel"] = b.pipeline_parallel;
    line["tensor_parallel"] = b.tensor_parallel;
    line["deterministic"] = b.deterministic;
    line["sequence_parallel"] = b.sequence_parallel;
    line["activation_checkpointing"] = b.activation_checkpointing;
    if (language) line["seq_len"] = seq_len;
    if (b.pipeline_parallel > 1) line["pipeline_schedule"] = parallel::name(b.pipeline_schedule);
    if (!r.plan_summary.empty()) line["plan_summary"] = r.plan_summary;  // a pipeline's bubble
    std::ofstream(b.json, std::ios::app) << line.dump() << "\n";
  }
  return r;
}

}  // namespace ddpx::bench
