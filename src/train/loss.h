// The training loss: cross-entropy against hard labels (label smoothing as an option, as
// torch.nn.CrossEntropyLoss(label_smoothing=s)) or against soft targets (mixup and cutmix).
#pragma once

#include <torch/types.h>

namespace ddpx::train {

// logits: (B, K); labels: (B) int64. The mean over the batch. A language model's logits
// (B, T, V) and labels (B, T): the mean over every token (the class dimension is last).
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                            double label_smoothing);

// logits: (B, K); targets: (B, K) float rows summing to 1. The mean over the batch of
// -sum_k target_k * log_softmax(logits)_k (timm's SoftTargetCrossEntropy).
torch::Tensor soft_target_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace ddpx::train
