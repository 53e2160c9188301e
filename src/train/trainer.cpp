// The training run behind `ddpx train`, as a recipe: join the job, build the data, the model, the
// optimizer and the parallel plan (parallel/plan.h), then loop over epochs and batches and
// report. How the model is split and where the update runs is the plan's business; the loop
// never asks which plan it runs.
#include "train/trainer.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include "core/log.h"
#include "core/timer.h"
#include "distributed/device.h"
#include "distributed/peak_flops.h"
#include "models/gpt.h"
#include "models/zoo/registry.h"
#include "optim/amp.h"
#include "parallel/placement.h"
#include "train/data_setup.h"
#include "train/epoch_meter.h"
#include "train/evaluate.h"
#include "train/header.h"
#include "train/job.h"
#include "train/micro_batch.h"
#include "train/plan_choice.h"
#include "train/pretrained.h"
#include "train/profiler.h"
#include "train/run_checkpoints.h"
#include "train/snapshot_request.h"

namespace ddpx::train {
namespace {

class Run {
 public:
  Run(const TrainOptions& options, StepHook after_step)
      : o_(options), after_step_(std::move(after_step)) {}

  TrainResult execute() {
    try {
      return train();
    } catch (const std::exception& e) {
      if (!dist::is_out_of_memory(e) || !context_) throw;
      fail_out_of_memory(o_, context_->rank(), device_, batch_size_);
    }
  }

 private:
  TrainResult train() {
    setup();
    TrainResult result;
    Stopwatch total;
    for (int64_t epoch = start_.epochs_done; epoch < o_.num_epochs; ++epoch) {
      EpochResult r = train_epoch(epoch);
      if (stopped_) break;  // after a snapshot asked for with SIGUSR2
      if (std::string summary = plan_->epoch_summary(); !summary.empty()) log::out("{}", summary);
      if ((epoch + 1) % o_.log_every == 0 || epoch + 1 == o_.num_epochs) {
        const EvalResult test = evaluate_plan();
        r.test_accuracy = result.final_test_accuracy = test.accuracy;
        r.test_loss = result.final_test_loss = test.loss;
        log_evaluation(task_, test);
        if (ema_) {
          ema_->assemble(*plan_, *ema_model_.ptr());  // collective: the plan assembles it
          const EvalResult ema = evaluate(ema_model_);
          r.test_accuracy_ema = result.final_test_accuracy_ema = ema.accuracy;
          log_evaluation(task_, ema, " (EMA)");
        }
      }
      r.plan_metrics = plan_->epoch_metrics();
      curves_->epoch(r, global_step_);
      if (!o_.save_dir.empty()) checkpoints_->save(epoch + 1, global_step_);
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
    context_ = join_job(o_);
    device_ = context_->device();
    // --amp auto becomes bf16 or off here, before anything reads the choice.
    const optim::AmpChoice amp = optim::resolve_amp(o_.amp, dist::bf16_support(device_));
    o_.amp = amp.amp;
    // The data's ranks are the data-parallel replicas (a pipeline's stages share one).
    const parallel::Mesh mesh = mesh_of(o_, context_->world_size());
    const int data_rank = mesh.data_rank(context_->rank()), data_size = mesh.data_size();
    batch_size_ = per_rank_batch(o_, data_size);
    counting_ = {data_size, mesh.size(parallel::MeshDim::kTensor)};
    data_ = make_train_data(o_, data_rank, data_size, batch_size_, device_.is_cuda());
    task_ = task_of(data_->splits.train);
    const int64_t updates =
        (data_->steps_per_epoch + o_.accumulation_steps - 1) / o_.accumulation_steps;

    // Model: the same seed on every rank (the plan makes the ranks agree anyway).
    torch::manual_seed(static_cast<uint64_t>(o_.seed));
    models::ModelConfig config{data_->splits.train.num_classes, data_->image_size, o_.stem};
    config.bias = o_.bias;
    auto model = models::create_model(o_.model, config);
    RunFacts facts;
    facts.amp_reason = amp.reason;
    if (!o_.pretrained.empty())
      facts.pretrained_note = load_pretrained(o_.pretrained, *model.ptr());
    // A pipeline moves only its rank's stages to the device (the model stays in host memory).
    if (!plan_places_model(o_)) parallel::place_model(*model.ptr(), device_, o_.channels_last);

    // Optimizer and plan: the plan builds the optimizer over the parameters this rank updates.
    facts.global_batch = batch_size_ * data_size * o_.accumulation_steps;
    facts.learning_rate =
        scaled_learning_rate(o_.learning_rate, o_.lr_scale, facts.global_batch, o_.base_batch_size);
    OptimizerConfig oc{o_.optimizer,
                       facts.learning_rate,
                       o_.weight_decay,
                       o_.momentum,
                       /*decay_matrices_only=*/task_.next_token,
                       o_.adam_beta1,
                       o_.adam_beta2};
    // By value: a plan may keep the factory (a sharded plan builds whole optimizers to save).
    auto optimizer = [oc](std::vector<torch::Tensor> params) {
      return make_optimizer(std::move(params), oc);
    };
    if (o_.amp == optim::Amp::kFp16) scaler_ = std::make_unique<optim::LossScaler>(device_);
    const int64_t parameters = models::count_parameters(*model.ptr());  // before any plan splits it
    const std::string utilization_line = measure_utilization(model, data_->image_size);
    // One sample, as the pipeline times its layers: an image, or a window of token ids.
    const int64_t size = data_->image_size;  // a token window's length (--seq_len)
    ChosenPlan chosen = task_.next_token ? choose_plan(o_, *context_, mesh, model, optimizer,
                                                       scaler_ != nullptr, {size}, torch::kLong)
                                         : choose_plan(o_, *context_, mesh, model, optimizer,
                                                       scaler_ != nullptr, {3, size, size});
    plan_ = std::move(chosen.plan);
    if (o_.ema_decay > 0) {
      // The average of the tensors this rank holds; a second instance of the architecture
      // receives it whole for evaluation and checkpoints (evaluation mode only).
      ema_model_ = models::create_model(o_.model, config);
      ema_model_.ptr()->eval();
      ema_ = std::make_unique<ModelEma>(held_tensors(*plan_), o_.ema_decay);
    }
    schedule_ = make_schedule(o_, facts.learning_rate, updates);
    CheckpointMeta meta{o_.model, data_->splits.train.num_classes, models::name(o_.stem),
                        data_->image_size, o_.bias};
    checkpoints_ = std::make_unique<RunCheckpoints>(
        o_, *context_, RunState{plan_.get(), &ema_, ema_model_, scaler_.get(), meta});
    start_ = checkpoints_->resume();
    global_step_ = start_.global_step;

    mixer_ = make_mixer(o_, data_->splits.train.num_classes, data_rank);
    curves_ = std::make_unique<Curves>(o_.metrics_json, o_.tensorboard, context_->rank(),
                                       context_->world_size());
    if (!o_.profile.empty()) {
      check_profile_dir(o_.profile);
      profiler_ = std::make_unique<StepProfiler>(o_.profile, o_.profile_skip, o_.profile_steps,
                                                 device_, *context_);
    }
    // The ranks agree on snapshot requests (SIGUSR1/SIGUSR2) every 5 optimizer steps on a CPU.
    snapshots_ = std::make_unique<SnapshotRequests>(*context_, device_,
                                                    device_.is_cpu() ? 5 : kGpuReadEvery);
    // The start-up lines (collective: the plan wraps the model, every rank names its device).
    facts.plan = plan_->describe();
    facts.sync_bn_layers = chosen.sync_bn_layers;
    facts.image_size = data_->image_size;
    facts.batch_size = batch_size_;
    add_run_facts(facts, o_, *context_, data_->splits, parameters);
    for (const auto& line : header_lines(o_, facts)) log::out("{}", line);
    if (!utilization_line.empty()) log::out("{}", utilization_line);
    if (!data_->sampler_note.empty()) log::out("{}", data_->sampler_note);
  }

  // A GPT on a GPU of the peak table: its training FLOPs a token (6N + 12·L·C·T) against the
  // peak, for the epoch lines' MFU, and the line that says so; else nothing.
  std::string measure_utilization(const torch::nn::AnyModule& model, int64_t seq_len) {
    const auto* gpt = model.ptr()->as<models::GptImpl>();
    if (gpt == nullptr) return "";
    const auto peak = dist::device_peak(device_, o_.amp);
    if (!peak) return "";
    utilization_.flops_per_unit = models::gpt_training_flops_per_token(gpt->options(), seq_len);
    utilization_.peak_flops = peak->peak.tflops * 1e12;
    return fmt::format(
        "MFU: {:.3f} GFLOP a token (6N + 12·L·C·T, nanoGPT's and llm.c's count) against the {} "
        "{} peak, {:.1f} TFLOP/s a GPU",
        utilization_.flops_per_unit / 1e9, peak->peak.label, peak->dtype, peak->peak.tflops);
  }

  EpochResult train_epoch(int64_t epoch) {
    plan_->set_training(true);
    const int64_t skip = epoch == start_.epochs_done ? start_.epoch_step : 0;
    data_->train_loader->start_epoch(data_->sampler->indices(epoch), epoch, skip);
    parallel::DeviceFeeder feeder(*data_->train_loader, device_, o_.channels_last);
    EpochMeter meter(o_, task_, *context_, *curves_, data_->steps_per_epoch, scaler_ != nullptr,
                     counting_, utilization_);
    int64_t step = skip;
    plan_->zero_grad();
    for (;;) {
      if (profiler_) profiler_->before_step();
      std::optional<data::Batch> batch;
      parallel::MicroBatchResult out;
      bool boundary = false;
      {
        RECORD_USER_SCOPE(kRangeStep);  // closed before the profiler may stop below
        {
          RECORD_USER_SCOPE(kRangeDataWait);
          batch = feeder.next();
        }
        if (!batch) break;
        boundary = (step + 1) % o_.accumulation_steps == 0 || step + 1 == data_->steps_per_epoch;
        out = train_step(*batch, boundary);
      }
      if (boundary && after_step_ && after_step_(global_step_, *context_, *plan_))
        return stop(meter);
      meter.add(out.loss, out.output, batch->labels);
      ++step;
      if (profiler_) profiler_->after_step();
      // At an optimizer step before the epoch's last (the poll is a collective).
      if (step % o_.accumulation_steps == 0 && step < data_->steps_per_epoch) {
        if (SnapshotRequest request = snapshots_->poll(global_step_)) {
          checkpoints_->snapshot(epoch, step, data_->steps_per_epoch, global_step_, request.stop);
          if (request.stop) return stop(meter);
        }
      }
      meter.after(epoch, step, global_step_,
                  schedule_->lr_at(std::max<int64_t>(global_step_ - 1, 0)));
    }
    return meter.finish(epoch, feeder.wait_seconds(), skipped_steps_,
                        scaler_ ? scaler_->current_scale() : 0.0);
  }

  EpochResult stop(EpochMeter& meter) {
    stopped_ = true;
    return meter.stop();
  }

  // One micro-batch through the plan: forward under autocast, the loss, backward (scaled for
  // fp16 and accumulation); at an accumulation boundary also the step and the EMA update.
  parallel::MicroBatchResult train_step(const data::Batch& batch, bool boundary) {
    parallel::MicroBatch mb = recipe_micro_batch(o_, device_, batch, *mixer_, scaler_.get());
    mb.step = global_step_;
    // Every batch carries the rate of the step it belongs to (the update may run inside the
    // last one's backward).
    mb.learning_rate = schedule_->lr_at(global_step_);
    parallel::MicroBatchResult out = plan_->forward_backward(mb, /*sync=*/boundary);
    if (boundary) {
      RECORD_USER_SCOPE(kRangeOptimizer);
      if (take_step() && ema_) ema_->update(held_tensors(*plan_));  // no communication
      plan_->zero_grad();
      ++global_step_;
    }
    return out;
  }

  // The step; false when fp16 skipped it. Every rank learns whether any found an inf or NaN in
  // its unscaled gradients, so all skip the same steps. Clipping sees the final gradient.
  bool take_step() {
    torch::Tensor found_inf;
    if (scaler_) {
      found_inf = scaler_->unscale(plan_->parameters());
      context_->all_reduce_sum(found_inf);
    }
    const bool stepping = !scaler_ || optim::LossScaler::should_step(found_inf);
    if (stepping) {
      if (o_.clip_grad_norm > 0) plan_->clip_grad_norm(o_.clip_grad_norm);
      plan_->step();  // with the update inside backward (describe() says so), only its check
    } else {
      ++skipped_steps_;
    }
    if (scaler_) scaler_->update(found_inf);
    return stepping;
  }

  EvalResult evaluate(torch::nn::AnyModule& model) {
    EvalSetup setup{device_, o_.amp, o_.channels_last};
    EvalResult accuracy =
        train::evaluate(model, *data_->test_loader, data_->splits.test.size(), *context_, setup);
    plan_->set_training(true);  // the EMA model stays in evaluation mode, the trained one not
    if (ema_) ema_model_.ptr()->eval();
    return accuracy;
  }
  EvalResult evaluate_plan() {
    EvalSetup setup{device_, o_.amp, o_.channels_last};
    EvalResult accuracy =
        train::evaluate(*plan_, *data_->test_loader, data_->splits.test.size(), *context_, setup);
    plan_->set_training(true);
    return accuracy;
  }

  TrainOptions o_;       // the caller's, with --amp auto resolved once the device is known
  StepHook after_step_;  // bench train: ends the run after its timed window
  std::shared_ptr<dist::Context> context_;
  torch::Device device_ = torch::kCPU;
  int64_t batch_size_ = 0, global_step_ = 0, skipped_steps_ = 0;
  std::unique_ptr<TrainData> data_;
  Task task_;                // what the model predicts: an image's class or every next token
  Counting counting_;        // how a rank's counted inputs scale to the job's
  Utilization utilization_;  // a GPT's FLOPs a token against the GPU's peak, for the MFU
  std::unique_ptr<parallel::Plan> plan_;       // owns the model and the optimizer
  std::unique_ptr<optim::LossScaler> scaler_;  // fp16 only
  torch::nn::AnyModule ema_model_;             // --ema_decay: the average's own instance
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<BatchMixer> mixer_;
  std::unique_ptr<Curves> curves_;
  std::unique_ptr<StepProfiler> profiler_;
  std::unique_ptr<RunCheckpoints> checkpoints_;
  std::unique_ptr<SnapshotRequests> snapshots_;
  TrainPosition start_;   // where this run starts (a resumed checkpoint's position)
  bool stopped_ = false;  // stopped after a snapshot (SIGUSR2)
};

}  // namespace

TrainResult run_training(const TrainOptions& options, const StepHook& after_step) {
  return Run(options, after_step).execute();
}

}  // namespace ddpx::train
