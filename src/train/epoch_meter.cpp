// What an epoch reports while it runs (see epoch_meter.h).
#include "train/epoch_meter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace ddpx::train {

EpochMeter::EpochMeter(const TrainOptions& options, const Task& task, dist::Context& context,
                       Curves& curves, int64_t steps_per_epoch, bool loss_scaling,
                       Counting counting, Utilization utilization)
    : o_(options),
      task_(task),
      context_(context),
      curves_(curves),
      steps_per_epoch_(steps_per_epoch),
      loss_scaling_(loss_scaling),
      counting_(counting),
      utilization_(utilization),
      bar_(options.progress && log::enabled(), steps_per_epoch),
      device_sums_(context.device()),
      read_every_(context.device().is_cpu() ? 1 : kGpuReadEvery),
      curve_every_(context.device().is_cpu() ? kCpuCurveEvery : kGpuReadEvery) {}

void EpochMeter::add(const torch::Tensor& loss, const torch::Tensor& output,
                     const torch::Tensor& labels) {
  device_sums_.add(loss, output, labels);
}

void EpochMeter::after(int64_t epoch, int64_t step, int64_t global_step, double lr_before) {
  if (step % read_every_ != 0 && step != steps_per_epoch_) return;
  sums_ = device_sums_.read();
  // fp16 skips the steps whose loss overflowed (the loss scaler's job), so only an unscaled run
  // stops on a non-finite loss.
  DDPX_CHECK(loss_scaling_ || std::isfinite(sums_.loss_sum), ErrorKind::kData,
             "the training loss became {} by epoch {} step {}; lower --learning_rate",
             sums_.loss_sum, epoch, step - 1);
  const double seconds = watch_.seconds();
  bar_.update(step, sums_.loss(), sums_.accuracy(),
              sums_.inputs * counting_.replicas / std::max(seconds, 1e-9));
  if (step % curve_every_ == 0) {
    curves_.step(interval_point(sums_, at_last_point_, seconds - last_point_s_, curve_every_,
                                global_step, lr_before, counting_.replicas, context_.device()));
    at_last_point_ = sums_;
    last_point_s_ = seconds;
  }
}

EpochResult EpochMeter::finish(int64_t epoch, double data_wait_s, int64_t skipped_steps,
                               double scale) {
  bar_.finish();
  sums_ = device_sums_.read();
  sums_.all_reduce(context_);
  EpochResult r;
  r.epoch = epoch;
  r.seconds = watch_.seconds();
  r.loss = sums_.loss();
  r.accuracy = sums_.accuracy();
  r.images_per_sec = sums_.inputs / counting_.copies / std::max(r.seconds, 1e-9);
  r.data_wait_s = data_wait_s;
  // The seed's line; a language model's counts tokens and adds the perplexity (and the MFU).
  std::string extra;
  if (task_.next_token) extra = fmt::format(" || perplexity_train - {:.3f}", std::exp(r.loss));
  if (utilization_.known()) {
    const double per_rank = r.images_per_sec / context_.world_size();
    r.mfu = utilization_.flops_per_unit * per_rank / utilization_.peak_flops;
    extra += fmt::format(" || mfu - {:.1f}%", 100 * *r.mfu);
  }
  log::out(
      "Epoch - {}/{}: time - {:.2f}s || {}loss_train - {:.4f} || accuracy_train - {:.4f} || "
      "{}_per_sec - {:.1f}{}",
      epoch, o_.num_epochs, r.seconds, task_.masked_lm ? "mlm_" : "", r.loss, r.accuracy,
      task_.unit, r.images_per_sec, extra);
  if (skipped_steps > 0) {
    log::out("fp16 loss scaling: {} steps skipped on inf/NaN gradients so far, scale {}",
             skipped_steps, scale);
  }
  return r;
}

}  // namespace ddpx::train
