#include "train/trainer.h"

#include <ATen/Context.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "dist/context.h"
#include "dist/ddp.h"
#include "dist/device.h"
#include "models/registry.h"
#include "optim/loss_scaler.h"
#include "train/amp.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/placement.h"
#include "train/pretrained.h"
#include "train/progress.h"
#include "train/step_strategy.h"
#include "train/threads.h"

namespace ddpx::train {
namespace {

constexpr int64_t kEvalBatchSize = 512;
// On a GPU the metrics are read (a host synchronization) every this many steps and at the end
// of an epoch; on a CPU every step.
constexpr int64_t kGpuReadEvery = 50;

// A CUDA out-of-memory error, whatever type it reached us as.
bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  return dynamic_cast<const c10::Error*>(&e) &&
         std::string(e.what()).find("out of memory") != std::string::npos;
}

int choose_threads(const TrainOptions& o) { return o.threads > 0 ? o.threads : default_threads(); }

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
  explicit Run(const TrainOptions& options) : o_(options) {}

  TrainResult execute() {
    try {
      return train();
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e) || !context_) throw;
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
      bool last = epoch + 1 == o_.num_epochs;
      if ((epoch + 1) % o_.log_every == 0 || last) {
        r.test_accuracy = evaluate();
        log::out("Accuracy on test dataset - {:.4f}", *r.test_accuracy);
        result.final_test_accuracy = r.test_accuracy;
      }
      write_metrics_line(r);
      if (!o_.save_dir.empty()) save(epoch + 1);
      result.epochs.push_back(r);
    }
    result.seconds = total.seconds();
    log::out("Training took {:.2f}s for {} epochs", result.seconds, result.epochs.size());
    return result;
  }

  void setup() {
    validate(o_);
    set_threads(choose_threads(o_));
    dist::InitOptions init;
    init.device = o_.device;
    init.backend = o_.backend;
    init.transport = o_.transport;
    init.timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.timeout_s * 1000));
    context_ = dist::init(init);
    log::set_rank(context_->rank());
    device_ = context_->device();
    check_amp(o_.amp, device_);
    if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(o_.cudnn_benchmark);
    batch_size_ = per_rank_batch(o_, context_->world_size());

    // Data: every rank reads the dataset; the sampler gives each rank its shard.
    data::DatasetSpec spec;
    spec.name = o_.dataset;
    spec.data_dir = o_.data_dir;
    spec.synthetic_train_size = o_.synthetic_size;
    spec.synthetic_test_size = std::max<int64_t>(o_.synthetic_size / 4, 1);
    spec.synthetic_height = spec.synthetic_width = o_.synthetic_image;
    spec.synthetic_classes = o_.synthetic_classes;
    spec.seed = o_.seed;
    splits_ = data::load_dataset(spec);
    image_size_ = o_.image_size > 0 ? o_.image_size : splits_.train.height();

    // Model: the same seed on every rank; DDP broadcasts rank 0's weights anyway.
    torch::manual_seed(static_cast<uint64_t>(o_.seed));
    models::ModelConfig config;
    config.num_classes = splits_.train.num_classes;
    config.image_size = image_size_;
    config.stem = o_.stem;
    model_ = models::create_model(o_.model, config);
    if (!o_.pretrained.empty()) pretrained_note_ = load_pretrained(o_.pretrained, *model_.ptr());
    place_model(*model_.ptr(), device_, o_.channels_last);

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
    OptimizerConfig oc{o_.optimizer, o_.learning_rate, o_.weight_decay, o_.momentum};
    optimizer_ = make_optimizer(model_.ptr()->parameters(), oc);
    if (o_.amp == Amp::kFp16) scaler_ = std::make_unique<optim::LossScaler>(device_);
    schedule_ = std::make_unique<LrSchedule>(
        o_.lr_schedule, o_.learning_rate, updates_per_epoch * o_.num_epochs,
        static_cast<int64_t>(std::llround(o_.warmup_epochs * updates_per_epoch)));

    resume();
    // DDP last: it registers its gradient hooks on the parameters as loaded (a checkpoint load
    // replaces their storage) and broadcasts rank 0's weights, pretrained or resumed.
    if (context_->distributed()) {
      dist::DdpOptions ddp;
      ddp.broadcast_buffers = o_.broadcast_buffers;
      ddp.find_unused_parameters = o_.find_unused_parameters;
      ddp.comm_hook = o_.comm_hook;
      ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, *context_, ddp);
    }
    // After the checkpoint is loaded (it moves the parameters and momentum buffers) and DDP.
    // Without loss scaling nothing reads the averaged gradients between backward and the step,
    // so the step may run inside backward, bucket by bucket; fp16 first checks them for inf.
    StepOptions step_options;
    step_options.inside_backward = !scaler_;
    step_ = std::make_unique<StepStrategy>(*optimizer_, *context_, ddp_.get(), step_options);
    print_header();
  }

  data::LoaderOptions loader_options(bool train) const {
    data::LoaderOptions l;
    l.batch_size = train ? batch_size_ : kEvalBatchSize;
    l.num_workers = o_.loader_workers;
    l.limit_batches = train ? o_.limit_train_batches : o_.limit_test_batches;
    l.seed = o_.seed * 1000003ULL + static_cast<uint64_t>(context_->rank());
    l.pin_memory = device_.is_cuda();
    l.transform.random_crop = train && o_.random_crop;
    l.transform.horizontal_flip = train && o_.horizontal_flip;
    l.transform.image_size = o_.image_size;
    l.transform.out_channels = 3;
    l.transform.normalize = data::parse_normalize(o_.normalize);
    l.transform.dataset_mean = splits_.mean;
    l.transform.dataset_std = splits_.std;
    return l;
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
    TrainPosition position = load_checkpoint(path, *model_.ptr(), *optimizer_, meta());
    start_epoch_ = position.epochs_done;
    global_step_ = position.global_step;
    if (scaler_ && position.loss_scale > 0)
      scaler_->load(position.loss_scale, position.loss_scale_growth);
    log::info("resumed from {} after {} epochs ({} steps)", path, start_epoch_, global_step_);
  }

  CheckpointMeta meta() const {
    return {o_.model, splits_.train.num_classes, o_.stem, image_size_};
  }

  void save(int64_t epochs_done) {
    if (context_->rank() == 0) {
      std::string path = checkpoint_path(o_.save_dir, epochs_done);
      TrainPosition position{epochs_done, global_step_};
      if (scaler_) {
        position.loss_scale = scaler_->current_scale();
        position.loss_scale_growth = scaler_->growth_tracker();
      }
      save_checkpoint(path, *model_.ptr(), *optimizer_, position, meta());
      prune_checkpoints(o_.save_dir, o_.keep_checkpoints);
    }
    context_->barrier();  // no rank runs ahead of a checkpoint it might resume from
  }

  void print_header() {
    // Collective: every rank names its device.
    auto devices = context_->gather_text(dist::describe_device(device_));
    const auto& d = splits_.train;
    log::out(
        "ddpx train: model {} ({:.2f}M parameters, stem {}) | dataset {} ({} train / {} test, "
        "{}x{}x{} -> 3x{}x{}, {} classes)",
        o_.model, models::count_parameters(*model_.ptr()) / 1e6, o_.stem, o_.dataset, d.size(),
        splits_.test.size(), d.height(), d.width(), d.channels(), image_size_, image_size_,
        d.num_classes);
    log::out(
        "optimizer {} lr {} momentum {} weight_decay {} | schedule {} warmup {} epochs | "
        "normalize {} | threads {}",
        o_.optimizer, o_.learning_rate, o_.optimizer == "sgd" ? o_.momentum : 0.0, o_.weight_decay,
        name(o_.lr_schedule), o_.warmup_epochs, o_.normalize, torch::get_num_threads());
    log::out(
        "world size {} ({}) | batch size {} per process, global batch {} | accumulation "
        "steps {} | learning rate {}",
        context_->world_size(), context_->backend(), batch_size_,
        batch_size_ * context_->world_size() * o_.accumulation_steps, o_.accumulation_steps,
        o_.learning_rate);
    log::out("device {} | amp {} | channels_last {} | optimizer step: {}", device_.str(),
             name(o_.amp), o_.channels_last ? "on" : "off", step_->describe());
    for (size_t r = 0; r < devices.size(); ++r) log::out("  rank {}: {}", r, devices[r]);
    if (!pretrained_note_.empty()) log::out("{}", pretrained_note_);
  }

  torch::Tensor forward(const torch::Tensor& images) {
    return ddp_ ? ddp_->forward(images) : model_.forward(images);
  }

  EpochResult train_epoch(int64_t epoch) {
    model_.ptr()->train();
    train_loader_->start_epoch(sampler_->indices(epoch), epoch);
    DeviceFeeder feeder(*train_loader_, device_, o_.channels_last);
    ProgressBar bar(o_.progress && log::enabled(), steps_per_epoch_);
    DeviceSums device_sums(device_);
    MetricSums sums;
    Stopwatch watch;
    const int64_t read_every = device_.is_cpu() ? 1 : kGpuReadEvery;
    int64_t step = 0;
    optimizer_->zero_grad();
    while (auto batch = feeder.next()) {
      bool boundary = (step + 1) % o_.accumulation_steps == 0 || step + 1 == steps_per_epoch_;
      torch::Tensor logits, loss;
      auto backward = [&] {
        {
          AutocastGuard autocast(o_.amp, device_);
          logits = forward(batch->images);
          loss = torch::nn::functional::cross_entropy(logits, batch->labels);
        }
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
        take_step();
        optimizer_->zero_grad();
        ++global_step_;
      }
      device_sums.add(loss, logits, batch->labels);
      ++step;
      if (step % read_every == 0 || step == steps_per_epoch_) {
        sums = device_sums.read();
        // fp16 skips the steps whose loss overflowed (the loss scaler's job), so only an
        // unscaled run stops on a non-finite loss.
        DDPX_CHECK(scaler_ || std::isfinite(sums.loss_sum), ErrorKind::kData,
                   "the training loss became {} by epoch {} step {}; lower --learning_rate",
                   sums.loss_sum, epoch, step - 1);
        bar.update(step, sums.loss(), sums.accuracy(),
                   sums.count * context_->world_size() / std::max(watch.seconds(), 1e-9));
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

  // The optimizer step after a synchronized backward. With fp16 loss scaling the gradients are
  // unscaled and checked first; every rank learns whether any rank found an inf or NaN, so all
  // skip the same steps and keep one scale.
  void take_step() {
    if (!scaler_) return step_->step();
    torch::Tensor found_inf = scaler_->unscale(model_.ptr()->parameters());
    context_->all_reduce_sum(found_inf);
    if (optim::LossScaler::should_step(found_inf)) {
      step_->step();
    } else {
      ++skipped_steps_;
    }
    scaler_->update(found_inf);
  }

  double evaluate() {
    torch::NoGradGuard no_grad;
    model_.ptr()->eval();
    auto indices =
        data::eval_indices(splits_.test.size(), context_->rank(), context_->world_size());
    test_loader_->start_epoch(std::move(indices), 0);
    DeviceFeeder feeder(*test_loader_, device_, o_.channels_last);
    DeviceSums device_sums(device_);
    while (auto batch = feeder.next()) {
      AutocastGuard autocast(o_.amp, device_);
      torch::Tensor logits = model_.forward(batch->images);
      device_sums.add(torch::zeros({}, logits.options().dtype(torch::kFloat32)), logits,
                      batch->labels);
    }
    MetricSums sums = device_sums.read();
    sums.all_reduce(*context_);
    return sums.accuracy();
  }

  void write_metrics_line(const EpochResult& r) const {
    if (o_.metrics_json.empty() || context_->rank() != 0) return;
    nlohmann::json line = {{"epoch", r.epoch},
                           {"time_s", r.seconds},
                           {"loss_train", r.loss},
                           {"accuracy_train", r.accuracy},
                           {"images_per_sec", r.images_per_sec},
                           {"data_wait_s", r.data_wait_s},
                           {"world_size", context_->world_size()}};
    if (r.test_accuracy) line["accuracy_test"] = *r.test_accuracy;
    std::ofstream out(o_.metrics_json, std::ios::app);
    DDPX_CHECK(out.good(), ErrorKind::kIo, "--metrics_json {}: cannot open for appending",
               o_.metrics_json);
    out << line.dump() << "\n";
  }

  const TrainOptions& o_;
  std::shared_ptr<dist::Context> context_;
  int64_t batch_size_ = 0;
  int64_t image_size_ = 0;
  std::string pretrained_note_;
  data::DatasetSplits splits_;
  torch::nn::AnyModule model_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
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
  int64_t global_step_ = 0;
};

}  // namespace

TrainResult run_training(const TrainOptions& options) { return Run(options).execute(); }

}  // namespace ddpx::train
