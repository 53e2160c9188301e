#include "train/loss.h"

#include <torch/nn/functional/loss.h>

namespace ddpx::train {

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                            double label_smoothing) {
  namespace F = torch::nn::functional;
  // The class dimension is last: (B, K) for images, (B, T, V) for every token of a window.
  return F::cross_entropy(logits.flatten(0, -2), labels.flatten(),
                          F::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

torch::Tensor soft_target_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  // log_softmax in float32 whatever autocast made the logits.
  auto log_probs = torch::log_softmax(logits.to(torch::kFloat32), /*dim=*/1);
  return -(targets * log_probs).sum(1).mean();
}

}  // namespace ddpx::train
