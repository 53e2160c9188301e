// The recipe's micro-batch (see micro_batch.h).
#include "train/micro_batch.h"

#include <ATen/record_function.h>

#include "optim/amp.h"
#include "train/loss.h"
#include "train/profiler.h"

namespace ddpx::train {

std::unique_ptr<BatchMixer> make_mixer(const TrainOptions& o, int64_t num_classes, int rank) {
  MixOptions mix{o.mixup, o.cutmix, /*switch_prob=*/0.5, o.label_smoothing, num_classes};
  return std::make_unique<BatchMixer>(mix, o.seed * 1000003ULL + static_cast<uint64_t>(rank) + 17);
}

parallel::MicroBatch recipe_micro_batch(const TrainOptions& o, const torch::Device& device,
                                        const data::Batch& batch, BatchMixer& mixer,
                                        optim::LossScaler* scaler) {
  parallel::MicroBatch mb;
  if (mixer.enabled()) {
    auto mixed = mixer.mix(batch.images, batch.labels);
    mb.input = mixed.images;
    mb.target = mixed.targets;
    mb.loss = [](const torch::Tensor& logits, const torch::Tensor& targets) {
      return soft_target_cross_entropy(logits, targets);
    };
  } else {
    mb.input = batch.images;
    mb.target = batch.labels;
    mb.loss = [smoothing = o.label_smoothing](const torch::Tensor& logits,
                                              const torch::Tensor& labels) {
      return cross_entropy(logits, labels, smoothing);
    };
  }
  const int64_t accumulation = o.accumulation_steps;
  mb.backward_root = [scaler, accumulation](const torch::Tensor& loss) {
    torch::Tensor scaled = scaler != nullptr ? scaler->scale(loss) : loss;
    return accumulation > 1 ? scaled / static_cast<double>(accumulation) : scaled;
  };
  mb.in_forward_context = [amp = o.amp, device](const std::function<void()>& forward) {
    RECORD_USER_SCOPE(kRangeForward);
    optim::AutocastGuard autocast(amp, device);
    forward();
  };
  mb.in_backward_context = [](const std::function<void()>& backward) {
    RECORD_USER_SCOPE(kRangeBackward);
    backward();
  };
  return mb;
}

}  // namespace ddpx::train
