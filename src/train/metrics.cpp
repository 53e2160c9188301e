#include "train/metrics.h"

#include <torch/types.h>

namespace ddpx::train {

void MetricSums::all_reduce(dist::Context& context) {
  if (!context.distributed()) return;
  torch::Tensor sums = torch::tensor({loss_sum, correct, count, inputs}, torch::kFloat64);
  context.all_reduce_sum(sums);
  auto a = sums.accessor<double, 1>();
  loss_sum = a[0];
  correct = a[1];
  count = a[2];
  inputs = a[3];
}

DeviceSums::DeviceSums(const torch::Device& device)
    : loss_sum_(torch::zeros({}, torch::dtype(torch::kFloat64).device(device))),
      correct_(torch::zeros({}, torch::dtype(torch::kInt64).device(device))),
      scored_(torch::zeros({}, torch::dtype(torch::kInt64).device(device))) {}

void DeviceSums::add(const torch::Tensor& batch_mean_loss, const torch::Tensor& logits,
                     const torch::Tensor& labels) {
  if (!batch_mean_loss.defined())
    return;  // a rank that computes no loss (a pipeline's first stages)
  torch::NoGradGuard no_grad;
  // Every prediction counts: one per image, or one per token of a language model's window
  // (logits (B, T, V), labels (B, T)); the class dimension is last. A masked LM's mean is over
  // its masked tokens, so its sum weighs the mean by their count. Integer outputs are the
  // predictions already (a vocabulary-parallel plan's, parallel/tensor/tensor_parallel_plan.h).
  const int64_t n = labels.numel();
  torch::Tensor scored = labels.ge(0).sum();
  loss_sum_.add_(batch_mean_loss.detach().to(torch::kFloat64) * scored);
  const torch::Tensor predicted = logits.is_floating_point() ? logits.argmax(-1) : logits;
  correct_.add_(predicted.eq(labels).sum());
  scored_.add_(scored);
  count_ += static_cast<double>(n);
}

MetricSums DeviceSums::read() const {
  MetricSums sums;
  sums.loss_sum = loss_sum_.item<double>();
  sums.correct = static_cast<double>(correct_.item<int64_t>());
  sums.count = static_cast<double>(scored_.item<int64_t>());
  sums.inputs = count_;
  return sums;
}

}  // namespace ddpx::train
