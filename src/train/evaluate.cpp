#include "train/evaluate.h"

#include <cmath>

#include "core/log.h"
#include "data/sampler.h"
#include "parallel/placement.h"
#include "train/loss.h"
#include "train/metrics.h"

namespace ddpx::train {

namespace {

// Every batch of this rank's share through `forward` (logits, or undefined where this rank does
// not count them); the counts summed over every rank.
template <typename Forward>
EvalResult evaluate_share(data::DataLoader& loader, int64_t test_size,
                          parallel::Evaluation::Share share, dist::Context& context,
                          const EvalSetup& setup, Forward&& forward) {
  torch::NoGradGuard no_grad;
  loader.start_epoch(data::eval_indices(test_size, share.rank, share.count), 0);
  parallel::DeviceFeeder feeder(loader, setup.device, setup.channels_last);
  DeviceSums sums(setup.device);
  while (auto batch = feeder.next()) {
    optim::AutocastGuard autocast(setup.amp, setup.device);
    torch::Tensor logits = forward(batch->images);
    if (!logits.defined()) continue;
    sums.add(cross_entropy(logits.to(torch::kFloat32), batch->labels, /*label_smoothing=*/0.0),
             logits, batch->labels);
  }
  MetricSums total = sums.read();
  total.all_reduce(context);
  return {total.accuracy(), total.loss()};
}

}  // namespace

void log_evaluation(const Task& task, const EvalResult& result, const std::string& label) {
  log::out("Accuracy on test dataset{} - {:.4f}", label, result.accuracy);
  if (task.next_token) {
    log::out("Loss on val dataset{} - {:.4f} || perplexity - {:.3f}", label, result.loss,
             std::exp(result.loss));
  }
}

EvalResult evaluate(torch::nn::AnyModule& model, data::DataLoader& loader, int64_t test_size,
                    dist::Context& context, const EvalSetup& setup) {
  model.ptr()->eval();
  return evaluate_share(loader, test_size, {context.rank(), context.world_size()}, context, setup,
                        [&](const torch::Tensor& x) { return model.forward(x); });
}

EvalResult evaluate(parallel::Evaluation& plan, data::DataLoader& loader, int64_t test_size,
                    dist::Context& context, const EvalSetup& setup) {
  plan.set_training(false);
  return evaluate_share(loader, test_size, plan.eval_share(context.rank(), context.world_size()),
                        context, setup,
                        [&](const torch::Tensor& x) { return plan.forward_eval(x); });
}

}  // namespace ddpx::train
