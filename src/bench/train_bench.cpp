#include "bench/train_bench.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "distributed/context.h"
#include "distributed/device.h"
#include "distributed/peak_flops.h"
#include "distributed/threads.h"
#include "models/flops.h"
#include "models/zoo/registry.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/placement.h"

namespace ddpx::bench {
namespace {

// Seconds since process `pid` started, from /proc (clock ticks since boot).
double process_age_seconds(const std::string& pid = "self") {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = content.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(content.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  double start_ticks = std::stod(field);
  std::ifstream uptime_file("/proc/uptime");
  double uptime = 0;
  uptime_file >> uptime;
  return uptime - start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Phase {
  double data = 0, fwd_bwd = 0, optim = 0, total = 0;
  int64_t steps = 0, images = 0;
};

}  // namespace

// Start-up is charged from the moment the user started the job: the `ddpx run` launcher when it
// started this worker (it sets DDPX_RESTART_COUNT; a restarted attempt counts from its own
// start), else this process.
double job_age_seconds() {
  const char* restarts = std::getenv("DDPX_RESTART_COUNT");
  if (restarts != nullptr && std::string(restarts) == "0") {
    double launcher_age = process_age_seconds(std::to_string(::getppid()));
    if (launcher_age > 0) return launcher_age;
  }
  return process_age_seconds();
}

TrainBenchResult run_train_bench(const TrainBenchOptions& o) {
  DDPX_CHECK(o.batch_size > 0 && o.steps > 0 && o.warmup >= 0, ErrorKind::kUsage,
             "--batch_size and --steps must be positive");
  // A GPT reads token windows, an image model images: either on the other's data would crash
  // inside its forward.
  const std::string& family = models::find_model(o.model).family;
  const bool language = family == "gpt" || family == "bert";
  DDPX_CHECK(!language || o.data == data::DatasetId::kTokens, ErrorKind::kUsage,
             "bench train: {} is a language model; add --dataset tokens --data_dir DIR (train.bin "
             "and val.bin from `ddpx data tokenize`) and --seq_len T",
             o.model);
  DDPX_CHECK(language || o.data != data::DatasetId::kTokens, ErrorKind::kUsage,
             "bench train: --dataset tokens feeds a language model, not {}; add --model gpt-nano "
             "(or another of the gpt family, `ddpx models`)",
             o.model);
  DDPX_CHECK(!language || o.loop == BenchLoop::kTrainer, ErrorKind::kUsage,
             "bench train: --loop phases times image models only; drop --loop phases to time {} "
             "in ddpx train's loop",
             o.model);
  if (o.loop == BenchLoop::kTrainer) return run_train_loop_bench(o);
  int threads = o.threads > 0 ? o.threads : dist::default_threads();
  dist::set_threads(threads);
  dist::InitOptions init;
  init.transport = o.transport;
  init.device = o.device;
  auto context = dist::init(init);
  log::set_rank(context->rank());
  const torch::Device device = context->device();
  // --amp auto: bf16 where this device computes it natively, as `ddpx train` decides.
  const optim::AmpChoice amp = optim::resolve_amp(o.amp, dist::bf16_support(device));
  optim::check_amp(amp.amp, device);
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
  auto synchronize = [&] {
    if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
  };

  data::DatasetSpec spec;
  spec.dataset = o.data;
  spec.data_dir = o.data_dir;
  spec.synthetic_train_size = o.batch_size * 8;
  spec.synthetic_test_size = o.batch_size;
  spec.synthetic_height = spec.synthetic_width = o.image_size;
  spec.synthetic_classes = o.num_classes;
  data::DatasetSplits splits = data::load_dataset(spec);

  torch::manual_seed(0);
  models::ModelConfig config;
  config.num_classes = splits.train.num_classes;
  config.image_size = o.image_size;
  config.stem = o.stem;
  config.bias = o.bias;
  auto model = models::create_model(o.model, config);
  // FLOPs of one image's forward, counted on the CPU before the model moves.
  const double forward_flops =
      models::count_forward_flops(model, torch::zeros({1, 3, o.image_size, o.image_size}));
  parallel::place_model(*model.ptr(), device, o.channels_last);
  // As `ddpx train`: the data-parallel plan with its step (parallel/data/step_strategy.h), or
  // torch::optim::SGD::step with --optimizer_step libtorch.
  parallel::DataParallelOptions dp;
  dp.ddp.bucket_bytes = o.bucket_mb << 20;
  dp.ddp.first_bucket_bytes = o.first_bucket_mb << 20;
  dp.ddp.comm_hook = o.comm_hook;
  dp.ddp.powersgd.rank = o.powersgd_rank;
  dp.ddp.powersgd.start_iter = o.powersgd_start_iter;
  dp.step.fused = o.fused_step;
  dp.step.split = o.fused_step && o.comm_hook == dist::CommHook::kAllreduce;  // as ddpx train
  auto make_sgd =
      [](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4));
  };
  parallel::DataParallelPlan plan(model, *context, make_sgd, dp);
  plan.describe();  // wraps the model (collective) before the timed steps

  data::LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.drop_last = true;
  lo.transform.random_crop = o.augment;
  lo.transform.horizontal_flip = o.augment;
  lo.transform.image_size =
      splits.train.height() == o.image_size && !splits.train.streamed() ? 0 : o.image_size;
  lo.transform.random_resized_crop = true;  // image folders only
  lo.transform.dataset_mean = splits.mean;
  lo.transform.dataset_std = splits.std;
  lo.pin_memory = device.is_cuda();
  data::DataLoader loader(splits.train, lo);
  data::SamplerOptions so;
  so.rank = context->rank();
  so.world_size = context->world_size();
  data::DistributedSampler sampler(splits.train.size(), so);
  int64_t epoch = 0;
  loader.start_epoch(sampler.indices(epoch), epoch);

  // The next batch, running on into the next epoch when one ends.
  auto next_batch = [&]() -> std::optional<data::Batch> {
    std::optional<data::Batch> batch = loader.next();
    if (!batch) {
      ++epoch;
      loader.start_epoch(sampler.indices(epoch), epoch);
      batch = loader.next();
    }
    return batch;
  };

  model.ptr()->train();
  double startup_s = 0;
  // One step; `sync` false runs the same compute under no_sync (no communication).
  auto step = [&](Phase& phase, bool sync) {
    Stopwatch total;
    std::optional<data::Batch> batch = next_batch();
    auto images = batch->images.to(device, /*non_blocking=*/true);
    if (o.channels_last) images = images.contiguous(torch::MemoryFormat::ChannelsLast);
    auto labels = batch->labels.to(device, /*non_blocking=*/true);
    synchronize();
    double data_s = total.seconds();
    // As the PyTorch peer: from job start to the first batch in hand.
    if (startup_s == 0) startup_s = job_age_seconds();
    Stopwatch compute;
    parallel::MicroBatch mb;
    mb.input = images;
    mb.target = labels;
    mb.loss = [](const torch::Tensor& logits, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(logits, target);
    };
    // fp16 without loss scaling: a benchmark of speed, not of convergence.
    mb.in_forward_context = [&](const std::function<void()>& forward) {
      optim::AutocastGuard autocast(amp.amp, device);
      forward();
    };
    plan.forward_backward(mb, sync);
    synchronize();
    double fwd_bwd_s = compute.seconds();
    Stopwatch optim;
    plan.step();  // after a no_sync backward: no update where it runs inside backward
    plan.zero_grad();
    synchronize();
    phase.data += data_s;
    phase.fwd_bwd += fwd_bwd_s;
    phase.optim += optim.seconds();
    phase.total += total.seconds();
    phase.steps += 1;
    phase.images += batch->size();
  };

  Phase warm, synced, local;
  for (int64_t i = 0; i < std::max<int64_t>(o.warmup, 1); ++i) {
    step(warm, true);
  }
  if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
  context->barrier();
  // Alternate blocks so that slow drift (thermal, other load) affects both phases alike.
  constexpr int64_t kBlock = 5;
  for (int64_t done = 0; done < o.steps;) {
    for (int64_t i = 0; i < kBlock && done < o.steps; ++i, ++done) step(synced, true);
    if (context->distributed())
      for (int64_t i = 0; i < kBlock; ++i) step(local, false);
  }

  // The loader alone, after training (so start-up is not charged with it): how far ahead of
  // training it could run.
  double loader_images_per_sec = 0;
  {
    ++epoch;  // a fresh epoch: batches prefetched during training would flatter the loader
    loader.start_epoch(sampler.indices(epoch), epoch);
    Stopwatch watch;
    int64_t images = 0;
    for (int64_t i = 0; i < std::max<int64_t>(o.steps, 4); ++i) {
      images += next_batch()->size();
    }
    loader_images_per_sec = images / watch.seconds();
  }

  TrainBenchResult r;
  r.sync = device.is_cuda() ? "every phase (3 device syncs a step)" : "none needed (CPU)";
  auto per_step_ms = [](double seconds, int64_t steps) {
    return 1e3 * seconds / std::max<int64_t>(steps, 1);
  };
  r.images_per_sec = synced.images * context->world_size() / synced.total;
  r.data_wait_ms = per_step_ms(synced.data, synced.steps);
  r.forward_backward_ms = per_step_ms(synced.fwd_bwd, synced.steps);
  r.exposed_comm_ms =
      context->distributed()
          ? std::max(0.0, r.forward_backward_ms - per_step_ms(local.fwd_bwd, local.steps))
          : 0;
  r.optimizer_ms = per_step_ms(synced.optim, synced.steps);
  r.step_ms = per_step_ms(synced.total, synced.steps);
  r.startup_s = startup_s;
  r.forward_gflop = forward_flops / 1e9;
  std::string peak_note = "peak unknown";
  if (device.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    r.peak_memory_gib =
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
            .peak /
        1073741824.0;
    if (auto peak = dist::device_peak(device, amp.amp)) {
      const double per_rank = r.images_per_sec / context->world_size();
      r.mfu = 3.0 * forward_flops * per_rank / (peak->peak.tflops * 1e12);
      peak_note = fmt::format("of the {} {} peak, {:.1f} TFLOP/s", peak->peak.label, peak->dtype,
                              peak->peak.tflops);
    }
  }
  // Report rank-averaged throughput figures; every rank must agree on what was printed.
  torch::Tensor figures = torch::tensor(
      {r.data_wait_ms, r.forward_backward_ms, r.exposed_comm_ms, r.optimizer_ms, r.step_ms},
      torch::kFloat64);
  context->all_reduce_sum(figures);
  figures /= context->world_size();
  auto f = figures.accessor<double, 1>();
  r.data_wait_ms = f[0];
  r.forward_backward_ms = f[1];
  r.exposed_comm_ms = f[2];
  r.optimizer_ms = f[3];
  r.step_ms = f[4];

  log::out(
      "# ddpx bench train: {} ({} stem), {} classes, {}x{} input, batch {} per rank, {} "
      "rank(s) over {}, data {}, {} thread(s) per rank, buckets {}+{} MiB, hook {}, device {}, "
      "amp {}{}, channels_last {}",
      o.model, models::name(o.stem), splits.train.num_classes, o.image_size, o.image_size,
      o.batch_size, context->world_size(), context->backend(), data::name(o.data), threads,
      o.first_bucket_mb, o.bucket_mb, dist::name(o.comm_hook), dist::describe_device(device),
      optim::name(amp.amp), amp.reason.empty() ? "" : " (" + amp.reason + ")",
      o.channels_last ? "on" : "off");
  log::out(
      "images/s (all ranks): {:.1f} | loop: phases (a copy of the step, split) | sync: {} | "
      "loader: 1 worker thread per rank, alone {:.0f} images/s per rank",
      r.images_per_sec, r.sync, loader_images_per_sec);
  log::out(
      "per step: {:.1f} ms | data wait {:.2f} ms ({:.1f}%) | forward+backward {:.1f} ms | "
      "communication not hidden {:.1f} ms ({:.1f}%) | optimizer {:.1f} ms",
      r.step_ms, r.data_wait_ms, 100 * r.data_wait_ms / r.step_ms, r.forward_backward_ms,
      r.exposed_comm_ms, 100 * r.exposed_comm_ms / r.step_ms, r.optimizer_ms);
  log::out("model: {:.2f} GFLOP forward per image (training 3x){}", r.forward_gflop,
           r.mfu ? fmt::format(" | MFU {:.1f}% {}", 100 * *r.mfu, peak_note) : "");
  if (r.peak_memory_gib) log::out("peak GPU memory (rank 0): {:.2f} GiB", *r.peak_memory_gib);
  log::out(
      "start-up: {:.2f} s from job start (the ddpx run launcher, else this process) to the first "
      "batch of the first step",
      r.startup_s);
  if (!o.json.empty() && context->rank() == 0) {
    nlohmann::json line = {{"model", o.model},
                           {"loop", "phases"},
                           {"sync", r.sync},
                           {"loader_workers", 1},
                           {"world_size", context->world_size()},
                           {"batch_size", o.batch_size},
                           {"threads", threads},
                           {"images_per_sec", r.images_per_sec},
                           {"step_ms", r.step_ms},
                           {"data_wait_ms", r.data_wait_ms},
                           {"forward_backward_ms", r.forward_backward_ms},
                           {"exposed_comm_ms", r.exposed_comm_ms},
                           {"optimizer_ms", r.optimizer_ms},
                           {"startup_s", r.startup_s},
                           {"bucket_mb", o.bucket_mb},
                           {"backend", context->backend()},
                           {"loader_images_per_sec", loader_images_per_sec},
                           {"device", dist::device_name(device)},
                           {"amp", optim::name(amp.amp)},
                           {"channels_last", o.channels_last},
                           {"forward_gflop", r.forward_gflop}};
    if (r.mfu) line["mfu"] = *r.mfu;
    if (r.peak_memory_gib) line["peak_memory_gib"] = *r.peak_memory_gib;
    std::ofstream(o.json, std::ios::app) << line.dump() << "\n";
  }
  return r;
}

}  // namespace ddpx::bench
