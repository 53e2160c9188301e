// Running sums for an epoch's metrics. Ranks reduce the sums and counts (never a mean of
// means), so the printed loss and accuracy are exactly those of the whole global batch stream.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "distributed/context.h"

namespace ddpx::train {

struct MetricSums {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  double correct = 0;
  double count = 0;   // the predictions scored (a masked LM's: its masked tokens only)
  double inputs = 0;  // the images or tokens read: what throughput counts

  void add(double batch_mean_loss, int64_t batch_correct, int64_t batch_size) {
    loss_sum += batch_mean_loss * batch_size;
    correct += batch_correct;
    count += batch_size;
    inputs += batch_size;
  }
  double loss() const { return count > 0 ? loss_sum / count : 0; }
  double accuracy() const { return count > 0 ? correct / count : 0; }

  // Sums every field over all ranks (in place).
  void all_reduce(dist::Context& context);
};

// The same sums kept on the training device: adding a batch queues two small kernels and never
// waits for the device; read() synchronizes (at a progress update or the end of an epoch).
class DeviceSums {
 public:
  explicit DeviceSums(const torch::Device& device);
  // A batch's mean loss, its logits and labels (on the device); an undefined loss adds nothing.
  // Labels below 0 (a masked LM's unmasked tokens) are neither scored nor weigh in the loss.
  void add(const torch::Tensor& batch_mean_loss, const torch::Tensor& logits,
           const torch::Tensor& labels);
  MetricSums read() const;

 private:
  torch::Tensor loss_sum_;  // float64
  torch::Tensor correct_;   // int64
  torch::Tensor scored_;    // int64: labels >= 0
  double count_ = 0;
};

}  // namespace ddpx::train
