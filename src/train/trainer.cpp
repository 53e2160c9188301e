#include "train/trainer.h"

#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "distributed/context.h"
#include "distributed/device.h"
#include "distributed/threads.h"
#include "models/zoo/registry.h"
#include "optim/amp.h"
#include "optim/clip_grad.h"
#include "optim/loss_scaler.h"
#include "parallel/data/ddp.h"
#include "parallel/data/sync_batch_norm.h"
#include "parallel/placement.h"
#include "train/checkpoint.h"
#include "train/curves.h"
#include "train/data_setup.h"
#include "train/ema.h"
#include "train/evaluate.h"
#include "train/header.h"
#include "train/loss.h"
#include "train/metrics.h"
#include "train/mixing.h"
#include "train/optim.h"
#include "train/pretrained.h"
#include "train/profiler.h"
#include "train/progress.h"
#include "train/snapshot_request.h"
#include "train/step_strategy.h"

namespace ddpx::train {
namespace {

// On a GPU the metrics are read (a host synchronization) every this many steps and at the end
// of an epoch; on a CPU every step.
constexpr int64_t kGpuReadEvery = 50;
// TensorBoard step points every this many steps on a CPU (on a GPU at every read).
constexpr int64_t kCpuCurveEvery = 10;
// The ranks agree on snapshot requests (SIGUSR1/SIGUSR2) every this many optimizer steps.
constexpr int64_t kCpuSnapshotCheckEvery = 5;

int choose_threads(const TrainOptions& o) {
  return o.threads > 0 ? o.threads : dist::default_threads();
}

int64_t per_rank_batch(const TrainOptions& o, int world_size) {
  if (!o.batch_size_scaled) return o.batch_size;
  DDPX_CHECK(o.batch_size % world_size == 0, ErrorKind::kUsage,
             "--batch_size_scaled: --batch_size {} does not divide by the world size {}; pick a "
             "multiple of {}",
             o.batch_size, world_size, world_size);
  return o.batch_size / world_size;
}

// One training run, top to bottom: set up, then loop over epochs.
class Run {
 public:
  Run(const TrainOptions& options, StepHook after_step)
      : o_(options), after_step_(std::move(after_step)) {}

  TrainResult execute() {
    try {
      return train();
    } catch (const std::exception& e) {
      if (!dist::is_out_of_memory(e) || !context_) throw;
      auto memory = dist::device_memory(device_);
      fail(ErrorKind::kUsage,
           "rank {}: {} out of memory training --model {} with --batch_size {} per GPU on {} "
           "({:.1f} GiB); try --batch_size {} (or --amp bf16, or --accumulation_steps 2 to keep "
           "the global batch)",
           context_->rank(), device_.str(), o_.model, batch_size_, dist::device_name(device_),
           memory ? memory->total_bytes / 1073741824.0 : 0.0,
           std::max<int64_t>(batch_size_ / 2, 1));
    }
  }

 private:
  TrainResult train() {
    setup();
    TrainResult result;
    Stopwatch total;
    for (int64_t epoch = start_epoch_; epoch < o_.num_epochs; ++epoch) {
      EpochResult r = train_epoch(epoch);
      if (stopped_) break;  // after a snapshot asked for with SIGUSR2
      bool last = epoch + 1 == o_.num_epochs;
      if ((epoch + 1) % o_.log_every == 0 || last) {
        r.test_accuracy = evaluate(model_);
        log::out("Accuracy on test dataset - {:.4f}", *r.test_accuracy);
        result.final_test_accuracy = r.test_accuracy;
        if (ema_) {
          r.test_accuracy_ema = evaluate(ema_model_);
          log::out("Accuracy on test dataset (EMA) - {:.4f}", *r.test_accuracy_ema);
          result.final_test_accuracy_ema = r.test_accuracy_ema;
        }
      }
      curves_->epoch(r, global_step_);
      if (!o_.save_dir.empty()) save(epoch + 1);
      result.epochs.push_back(r);
    }
    if (profiler_) profiler_->finish();
    result.seconds = total.seconds();
    log::out("Training took {:.2f}s for {} epochs", result.seconds, result.epochs.size());
    return result;
  }

  void setup() {
    install_snapshot_signals();  // first: a request that comes early must not end the process
    validate(o_);
    dist::set_threads(choose_threads(o_));
    dist::InitOptions init;
    init.device = o_.device;
    init.backend = o_.backend;
    init.transport = o_.transport;
    init.timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.timeout_s * 1000));
    context_ = dist::init(init);
    log::set_rank(context_->rank());
    device_ = context_->device();
    optim::check_amp(o_.amp, device_);
    if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(o_.cudnn_benchmark);
    batch_size_ = per_rank_batch(o_, context_->world_size());

    // Data: every rank reads the dataset; the sampler gives each rank its shard.
    splits_ = data::load_dataset(dataset_spec(o_));
    image_size_ = o_.image_size > 0 ? o_.image_size : splits_.train.height();

    // Model: the same seed on every rank; DDP broadcasts rank 0's weights anyway.
    torch::manual_seed(static_cast<uint64_t>(o_.seed));
    models::ModelConfig config;
    config.num_classes = splits_.train.num_classes;
    config.image_size = image_size_;
    config.stem = models::stem_from_name(o_.stem, "--stem");  // until options hold the enum
    model_ = models::create_model(o_.model, config);
    if (!o_.pretrained.empty()) pretrained_note_ = load_pretrained(o_.pretrained, *model_.ptr());
    parallel::place_model(*model_.ptr(), device_, o_.channels_last);
    if (o_.sync_bn) {
      sync_bn_layers_ = parallel::convert_sync_batch_norm(*model_.ptr(), *context_);
      DDPX_CHECK(sync_bn_layers_ > 0, ErrorKind::kUsage,
                 "--sync_bn: --model {} has no BatchNorm layers to synchronize; drop --sync_bn",
                 o_.model);
    }
    if (o_.ema_decay > 0) {
      // A second instance of the architecture holds the average (evaluation mode only).
      ema_model_ = models::create_model(o_.model, config);
      ema_ = std::make_unique<ModelEma>(ema_model_, *model_.ptr(), o_.ema_decay);
    }

    data::SamplerOptions sampler;
    sampler.rank = context_->rank();
    sampler.world_size = context_->world_size();
    sampler.seed = o_.seed;
    sampler_ = std::make_unique<data::DistributedSampler>(splits_.train.size(), sampler);
    train_loader_ = std::make_unique<data::DataLoader>(splits_.train, loader_options(true));
    test_loader_ = std::make_unique<data::DataLoader>(splits_.test, loader_options(false));

    steps_per_epoch_ = (sampler_->num_samples() + batch_size_ - 1) / batch_size_;
    if (o_.limit_train_batches > 0)
      steps_per_epoch_ = std::min(steps_per_epoch_, o_.limit_train_batches);
    int64_t updates_per_epoch =
        (steps_per_epoch_ + o_.accumulation_steps - 1) / o_.accumulation_steps;
    global_batch_ = batch_size_ * context_->world_size() * o_.accumulation_steps;
    learning_rate_ =
        scaled_learning_rate(o_.learning_rate, o_.lr_scale, global_batch_, o_.base_batch_size);
    OptimizerConfig oc{o_.optimizer, learning_rate_, o_.weight_decay, o_.momentum};
    optimizer_ = make_optimizer(model_.ptr()->parameters(), oc);
    if (o_.amp == optim::Amp::kFp16) scaler_ = std::make_unique<optim::LossScaler>(device_);
    schedule_ = std::make_unique<LrSchedule>(
        o_.lr_schedule, learning_rate_, updates_per_epoch * o_.num_epochs,
        static_cast<int64_t>(std::llround(o_.warmup_epochs * updates_per_epoch)));

    resume();
    // DDP last: it registers its gradient hooks on the parameters as loaded (a checkpoint load
    // replaces their storage) and broadcasts rank 0's weights, pretrained or resumed.
    if (context_->distributed()) {
      parallel::DdpOptions ddp;
      ddp.broadcast_buffers = o_.broadcast_buffers;
      ddp.find_unused_parameters = o_.find_unused_parameters;
      ddp.comm_hook = o_.comm_hook;
      ddp_ = std::make_unique<parallel::DistributedDataParallel>(model_, *context_, ddp);
    }
    // After the checkpoint is loaded (it moves the parameters and momentum buffers) and DDP.
    // Without loss scaling or clipping nothing reads the averaged gradients between backward and
    // the step, so the step may run inside backward, bucket by bucket; fp16 first checks them
    // for inf, clipping needs the norm of all of them. Clipping also needs every rank to hold
    // the whole averaged gradient, so the step is not split across ranks either.
    StepOptions step_options;
    step_options.inside_backward = !scaler_ && o_.clip_grad_norm == 0;
    step_options.split = o_.clip_grad_norm == 0;
    step_ = std::make_unique<StepStrategy>(*optimizer_, *context_, ddp_.get(), step_options);

    MixOptions mix{o_.mixup, o_.cutmix, /*switch_prob=*/0.5, o_.label_smoothing,
                   splits_.train.num_classes};
    mixer_ = std::make_unique<BatchMixer>(
        mix, o_.seed * 1000003ULL + static_cast<uint64_t>(context_->rank()) + 17);
    curves_ = std::make_unique<Curves>(o_.metrics_json, o_.tensorboard, context_->rank(),
                                       context_->world_size());
    if (!o_.profile.empty()) {
      check_profile_dir(o_.profile);
      profiler_ = std::make_unique<StepProfiler>(o_.profile, o_.profile_skip, o_.profile_steps,
                                                 device_, *context_);
    }
    snapshots_ = std::make_unique<SnapshotRequests>(
        *context_, device_, device_.is_cpu() ? kCpuSnapshotCheckEvery : kGpuReadEvery);
    print_header();
  }

  data::LoaderOptions loader_options(bool train) const {
    return train::loader_options(o_, splits_, train, train ? batch_size_ : o_.eval_batch_size,
                                 static_cast<uint64_t>(context_->rank()), device_.is_cuda());
  }

  void resume() {
    if (o_.resume.empty()) return;
    std::string path = o_.resume;
    if (path == "auto") {
      auto found = find_latest_good_checkpoint(o_.save_dir);
      if (!found) {
        log::info("--resume auto: no checkpoint in {} yet, starting from scratch", o_.save_dir);
        return;
      }
      path = *found;
    }
    DDPX_CHECK(std::filesystem::exists(path), ErrorKind::kUsage,
               "--resume {}: no such file; give a checkpoint path or 'auto'", path);
    TrainPosition position =
        load_checkpoint(path, *model_.ptr(), *optimizer_, meta(), ema_ ? &ema_->module() : nullptr);
    start_epoch_ = position.epochs_done;
    global_step_ = position.global_step;
    resume_epoch_step_ = position.epoch_step;
    if (ema_) {
      if (position.ema_updates >= 0) {
        ema_->set_updates(position.ema_updates);
      } else {
        // A checkpoint from a run without EMA: the average starts from the resumed weights.
        ema_ = std::make_unique<ModelEma>(ema_model_, *model_.ptr(), o_.ema_decay);
        log::info("--ema_decay: {} holds no EMA weights; the average starts from its weights",
                  path);
      }
    }
    if (scaler_ && position.loss_scale > 0)
      scaler_->load(position.loss_scale, position.loss_scale_growth);
    if (resume_epoch_step_ > 0) {
      log::info("resumed from {} at epoch {} step {} ({} steps in all)", path, start_epoch_,
                resume_epoch_step_, global_step_);
    } else {
      log::info("resumed from {} after {} epochs ({} steps)", path, start_epoch_, global_step_);
    }
  }

  CheckpointMeta meta() const {
    return {o_.model, splits_.train.num_classes, o_.stem, image_size_};
  }

  TrainPosition position(int64_t epochs_done, int64_t epoch_step) const {
    TrainPosition position{epochs_done, global_step_};
    position.epoch_step = epoch_step;
    if (scaler_) {
      position.loss_scale = scaler_->current_scale();
      position.loss_scale_growth = scaler_->growth_tracker();
    }
    if (ema_) position.ema_updates = ema_->updates();
    return position;
  }

  void save(int64_t epochs_done) {
    if (context_->rank() == 0) {
      save_checkpoint(checkpoint_path(o_.save_dir, epochs_done), *model_.ptr(), *optimizer_,
                      position(epochs_done, 0), meta(), ema_ ? &ema_->module() : nullptr);
      prune_checkpoints(o_.save_dir, o_.keep_checkpoints);
    }
    context_->barrier();  // no rank runs ahead of a checkpoint it might resume from
  }

  // A checkpoint `step` steps into `epoch`, asked for while training (snapshot_request.h).
  void snapshot(int64_t epoch, int64_t step, bool stop) {
    if (o_.save_dir.empty()) {
      if (context_->rank() == 0)
        log::warn("a snapshot was asked for, but this run has no --save_dir; none written");
    } else if (context_->rank() == 0) {
      std::string path = snapshot_path(o_.save_dir, epoch, step);
      save_checkpoint(path, *model_.ptr(), *optimizer_, position(epoch, step), meta(),
                      ema_ ? &ema_->module() : nullptr);
      log::out("Snapshot - epoch {} step {}/{}: {}", epoch, step, steps_per_epoch_, path);
      if (stop) log::out("Stopping after the snapshot; resume with --resume {}", path);
    }
    context_->barrier();
  }

  void print_header() {
    RunFacts f;
    // Collective: every rank names its device.
    f.rank_devices = context_->gather_text(dist::describe_device(device_));
    const auto& d = splits_.train;
    f.parameters_millions = models::count_parameters(*model_.ptr()) / 1e6;
    f.stem_choice = models::find_model(o_.model).has_cifar_stem;
    f.train_size = d.size();
    f.test_size = splits_.test.size();
    f.height = d.height();
    f.width = d.width();
    f.channels = d.channels();
    f.image_size = image_size_;
    f.num_classes = d.num_classes;
    f.threads = torch::get_num_threads();
    f.world_size = context_->world_size();
    f.backend = context_->backend();
    f.batch_size = batch_size_;
    f.global_batch = global_batch_;
    f.learning_rate = learning_rate_;
    f.device = device_.str();
    f.step = step_->describe();
    f.sync_bn_layers = sync_bn_layers_;
    f.pretrained_note = pretrained_note_;
    for (const auto& line : header_lines(o_, f)) log::out("{}", line);
  }

  torch::Tensor forward(const torch::Tensor& images) {
    return ddp_ ? ddp_->forward(images) : model_.forward(images);
  }

  EpochResult train_epoch(int64_t epoch) {
    model_.ptr()->train();
    const int64_t skip = epoch == start_epoch_ ? resume_epoch_step_ : 0;
    train_loader_->start_epoch(sampler_->indices(epoch), epoch, skip);
    parallel::DeviceFeeder feeder(*train_loader_, device_, o_.channels_last);
    ProgressBar bar(o_.progress && log::enabled(), steps_per_epoch_);
    DeviceSums device_sums(device_);
    MetricSums sums, at_last_point;
    Stopwatch watch;
    double last_point_s = 0;
    const int64_t read_every = device_.is_cpu() ? 1 : kGpuReadEvery;
    const int64_t curve_every = device_.is_cpu() ? kCpuCurveEvery : kGpuReadEvery;
    int64_t step = skip;
    optimizer_->zero_grad();
    for (;;) {
      if (profiler_) profiler_->before_step();
      std::optional<data::Batch> batch;
      torch::Tensor logits, loss;
      bool boundary = false;
      {
        RECORD_USER_SCOPE(kRangeStep);  // closed before the profiler may stop below
        {
          RECORD_USER_SCOPE(kRangeDataWait);
          batch = feeder.next();
        }
        if (!batch) break;
        boundary = (step + 1) % o_.accumulation_steps == 0 || step + 1 == steps_per_epoch_;
        train_step(*batch, boundary, logits, loss);
      }
      if (boundary && after_step_ && after_step_(global_step_, *context_)) {
        stopped_ = true;
        bar.finish();
        return {};
      }
      // With mixup the accuracy counts the prediction of each image's own (dominant) label.
      device_sums.add(loss, logits, batch->labels);
      ++step;
      if (profiler_) profiler_->after_step();
      // At an optimizer step before the epoch's last (every rank computes the same condition:
      // the poll is a collective).
      bool stepped = step % o_.accumulation_steps == 0;
      if (stepped && step < steps_per_epoch_) {
        if (SnapshotRequest request = snapshots_->poll(global_step_)) {
          snapshot(epoch, step, request.stop);
          if (request.stop) {
            stopped_ = true;
            bar.finish();
            return {};
          }
        }
      }
      if (step % read_every == 0 || step == steps_per_epoch_) {
        sums = device_sums.read();
        // fp16 skips the steps whose loss overflowed (the loss scaler's job), so only an
        // unscaled run stops on a non-finite loss.
        DDPX_CHECK(scaler_ || std::isfinite(sums.loss_sum), ErrorKind::kData,
                   "the training loss became {} by epoch {} step {}; lower --learning_rate",
                   sums.loss_sum, epoch, step - 1);
        bar.update(step, sums.loss(), sums.accuracy(),
                   sums.count * context_->world_size() / std::max(watch.seconds(), 1e-9));
        if (step % curve_every == 0) {
          add_curve_point(sums, at_last_point, watch.seconds() - last_point_s, curve_every);
          at_last_point = sums;
          last_point_s = watch.seconds();
        }
      }
    }
    bar.finish();
    sums = device_sums.read();
    sums.all_reduce(*context_);
    EpochResult r;
    r.epoch = epoch;
    r.seconds = watch.seconds();
    r.loss = sums.loss();
    r.accuracy = sums.accuracy();
    r.images_per_sec = sums.count / std::max(r.seconds, 1e-9);
    r.data_wait_s = feeder.wait_seconds();
    log::out(
        "Epoch - {}/{}: time - {:.2f}s || loss_train - {:.4f} || accuracy_train - {:.4f} || "
        "images_per_sec - {:.1f}",
        epoch, o_.num_epochs, r.seconds, r.loss, r.accuracy, r.images_per_sec);
    if (skipped_steps_ > 0) {
      log::out("fp16 loss scaling: {} steps skipped on inf/NaN gradients so far, scale {}",
               skipped_steps_, scaler_->current_scale());
    }
    return r;
  }

  // Forward, loss and backward of one micro-batch; at an accumulation boundary also the
  // optimizer step and the EMA update. `logits` and `loss` are the batch's, for the metrics.
  void train_step(const data::Batch& batch, bool boundary, torch::Tensor& logits,
                  torch::Tensor& loss) {
    auto backward = [&] {
      {
        RECORD_USER_SCOPE(kRangeForward);
        optim::AutocastGuard autocast(o_.amp, device_);
        if (mixer_->enabled()) {
          auto mixed = mixer_->mix(batch.images, batch.labels);
          logits = forward(mixed.images);
          loss = soft_target_cross_entropy(logits, mixed.targets);
        } else {
          logits = forward(batch.images);
          loss = cross_entropy(logits, batch.labels, o_.label_smoothing);
        }
      }
      RECORD_USER_SCOPE(kRangeBackward);
      torch::Tensor scaled = scaler_ ? scaler_->scale(loss) : loss;
      (o_.accumulation_steps > 1 ? scaled / static_cast<double>(o_.accumulation_steps) : scaled)
          .backward();
    };
    // Before backward: the step may run inside it (step_strategy.h).
    if (boundary) step_->set_learning_rate(schedule_->lr_at(global_step_));
    if (ddp_ && !boundary) {
      auto guard = ddp_->no_sync();
      backward();
    } else {
      backward();
    }
    if (boundary) {
      RECORD_USER_SCOPE(kRangeOptimizer);
      if (take_step() && ema_) ema_->update(*model_.ptr());
      optimizer_->zero_grad();
      ++global_step_;
    }
  }

  // The optimizer step after a synchronized backward; false when it was skipped. With fp16 loss
  // scaling the gradients are unscaled and checked first; every rank learns whether any rank
  // found an inf or NaN, so all skip the same steps and keep one scale. Clipping sees the
  // unscaled, averaged gradient: the same norm on every rank.
  bool take_step() {
    torch::Tensor found_inf;
    if (scaler_) {
      found_inf = scaler_->unscale(model_.ptr()->parameters());
      context_->all_reduce_sum(found_inf);
    }
    bool stepping = !scaler_ || optim::LossScaler::should_step(found_inf);
    if (stepping) {
      // On the device: libtorch's clip_grad_norm_ would read the norm back every step.
      if (o_.clip_grad_norm > 0)
        optim::clip_grad_norm(model_.ptr()->parameters(), o_.clip_grad_norm);
      step_->step();
    } else {
      ++skipped_steps_;
    }
    if (scaler_) scaler_->update(found_inf);
    return stepping;
  }

  double evaluate(torch::nn::AnyModule& model) {
    EvalSetup setup{device_, o_.amp, o_.channels_last};
    double accuracy = train::evaluate(model, *test_loader_, splits_.test.size(), *context_, setup);
    model_.ptr()->train();  // the EMA model stays in evaluation mode, the trained one not
    if (ema_) ema_model_.ptr()->eval();
    return accuracy;
  }

  // A TensorBoard point for the steps since the previous one (rank 0 writes it).
  void add_curve_point(const MetricSums& now, const MetricSums& before, double seconds,
                       int64_t steps) {
    MetricSums interval;
    interval.loss_sum = now.loss_sum - before.loss_sum;
    interval.correct = now.correct - before.correct;
    interval.count = now.count - before.count;
    StepPoint p;
    p.step = global_step_;
    p.loss = interval.loss();
    p.accuracy = interval.accuracy();
    p.learning_rate = schedule_->lr_at(std::max<int64_t>(global_step_ - 1, 0));
    p.images_per_sec = interval.count * context_->world_size() / std::max(seconds, 1e-9);
    p.step_time_s = seconds / static_cast<double>(steps);
    p.gpu_memory_gib = gpu_memory_gib(device_);
    curves_->step(p);
  }

  const TrainOptions& o_;
  StepHook after_step_;  // bench train: ends the run after its timed window
  std::shared_ptr<dist::Context> context_;
  int64_t batch_size_ = 0;
  int64_t image_size_ = 0;
  std::string pretrained_note_;
  data::DatasetSplits splits_;
  torch::nn::AnyModule model_;
  torch::nn::AnyModule ema_model_;  // --ema_decay: the average's own instance
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<BatchMixer> mixer_;
  std::unique_ptr<Curves> curves_;
  std::unique_ptr<StepProfiler> profiler_;
  int sync_bn_layers_ = 0;
  int64_t global_batch_ = 0;
  double learning_rate_ = 0;  // after --lr_scale
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<data::DistributedSampler> sampler_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<StepStrategy> step_;
  std::unique_ptr<optim::LossScaler> scaler_;  // fp16 only
  int64_t skipped_steps_ = 0;
  torch::Device device_ = torch::kCPU;
  std::unique_ptr<LrSchedule> schedule_;
  int64_t steps_per_epoch_ = 0;
  int64_t start_epoch_ = 0;
  int64_t resume_epoch_step_ = 0;  // a snapshot's steps into its epoch
  int64_t global_step_ = 0;
  std::unique_ptr<SnapshotRequests> snapshots_;
  bool stopped_ = false;  // stopped after a snapshot (SIGUSR2)
};

}  // namespace

TrainResult run_training(const TrainOptions& options, const StepHook& after_step) {
  return Run(options, after_step).execute();
}

}  // namespace ddpx::train
