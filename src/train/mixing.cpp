#include "train/mixing.h"

#include <ATen/TensorIndexing.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ddpx::train {

torch::Tensor smoothed_one_hot(const torch::Tensor& labels, int64_t num_classes, double smoothing) {
  const double off = smoothing / static_cast<double>(num_classes);
  const double on = 1.0 - smoothing + off;
  auto targets = torch::full({labels.size(0), num_classes}, off,
                             torch::dtype(torch::kFloat32).device(labels.device()));
  return targets.scatter_(1, labels.view({-1, 1}), on);
}

BatchMixer::BatchMixer(const MixOptions& options, uint64_t seed)
    : options_(options), rng_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {}

// Beta(a, a) as X / (X + Y) with X, Y ~ Gamma(a, 1).
double BatchMixer::beta(double alpha) {
  std::gamma_distribution<double> gamma(alpha, 1.0);
  double x = gamma(rng_), y = gamma(rng_);
  return x + y > 0 ? x / (x + y) : 0.5;
}

BatchMixer::Mixed BatchMixer::mix(const torch::Tensor& images, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  Mixed out;
  const bool both = options_.mixup_alpha > 0 && options_.cutmix_alpha > 0;
  out.cutmix = options_.cutmix_alpha > 0 &&
               (!both || std::uniform_real_distribution<double>(0, 1)(rng_) < options_.switch_prob);
  const auto flipped = images.flip(0);
  if (out.cutmix) {
    // A box of area (1 - lam) of the image, centred uniformly, clipped to the image.
    double lam = beta(options_.cutmix_alpha);
    const int64_t h = images.size(2), w = images.size(3);
    const double cut = std::sqrt(1.0 - lam);
    const auto cut_h = static_cast<int64_t>(h * cut), cut_w = static_cast<int64_t>(w * cut);
    const int64_t cy = std::uniform_int_distribution<int64_t>(0, h - 1)(rng_);
    const int64_t cx = std::uniform_int_distribution<int64_t>(0, w - 1)(rng_);
    const int64_t y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, h);
    const int64_t y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, h);
    const int64_t x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, w);
    const int64_t x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, w);
    out.images = images.clone();
    using torch::indexing::Slice;
    const std::vector<torch::indexing::TensorIndex> box{Slice(), Slice(), Slice(y0, y1),
                                                        Slice(x0, x1)};
    out.images.index_put_(box, flipped.index(box));
    out.lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
  } else {
    out.lam = beta(options_.mixup_alpha);
    out.images = images * out.lam + flipped * (1.0 - out.lam);
  }
  const auto hard = smoothed_one_hot(labels, options_.num_classes, options_.label_smoothing);
  out.targets = hard * out.lam + hard.flip(0) * (1.0 - out.lam);
  return out;
}

}  // namespace ddpx::train
