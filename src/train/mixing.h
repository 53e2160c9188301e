// Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) on a batch already on the device, as
// timm's Mixup in "batch" mode: one mixing ratio per batch, drawn from Beta(alpha, alpha); each
// image is mixed with the image at the mirrored position in the batch (batch.flip(0)); with
// both enabled, a batch uses CutMix with probability `switch_prob`. CutMix's ratio is corrected
// to the area of the box actually pasted. The targets become soft: lam * one_hot(y) +
// (1 - lam) * one_hot(y_flipped), label-smoothed as timm does.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>

namespace ddpx::train {

struct MixOptions {
  double mixup_alpha = 0.0;   // 0: no mixup
  double cutmix_alpha = 0.0;  // 0: no cutmix
  double switch_prob = 0.5;   // with both: the share of batches that use cutmix
  double label_smoothing = 0.0;
  int64_t num_classes = 0;
};

// Hard labels (B) -> smoothed one-hot targets (B, K) float32: 1 - s + s/K on the label, s/K off.
torch::Tensor smoothed_one_hot(const torch::Tensor& labels, int64_t num_classes, double smoothing);

class BatchMixer {
 public:
  BatchMixer(const MixOptions& options, uint64_t seed);
  bool enabled() const { return options_.mixup_alpha > 0 || options_.cutmix_alpha > 0; }

  struct Mixed {
    torch::Tensor images;   // (B, C, H, W), a new tensor
    torch::Tensor targets;  // (B, K) float32
    double lam = 1.0;       // the weight of the original image
    bool cutmix = false;
  };
  Mixed mix(const torch::Tensor& images, const torch::Tensor& labels);

 private:
  double beta(double alpha);

  MixOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace ddpx::train
