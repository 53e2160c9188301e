// torchvision's transforms for images of any size, on one decoded (H, W, 3) uint8 image:
// training RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) with get_params' sampling
// (ten tries of an area fraction, uniform, and a log-uniform aspect ratio; then the centre crop
// clamped to the ratio range) and RandomHorizontalFlip; evaluation Resize(round(size / crop_pct))
// of the shorter side and CenterCrop(size). The resize is the `exact` mode: torchvision's
// tensor path (`interpolate(..., mode="bilinear", antialias=True)` on float, rounded back to
// uint8), so given the same crop the pixels equal torchvision's. Random draws come from the
// stream the caller passes (the loader's, seeded by seed, epoch and sample), in a fixed order:
// the area and ratio of each try, the top, the left, then the flip.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>

namespace ddpx::data {

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool fallback = false;  // no try fitted: the clamped centre crop
};

struct ResizedCropOptions {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// RandomResizedCrop.get_params on a height x width image.
CropBox random_resized_crop_box(int64_t height, int64_t width, std::mt19937_64& rng,
                                const ResizedCropOptions& options = {});

// (H, W, 3) uint8 -> (out_height, out_width, 3) uint8 by antialiased bilinear, as torchvision's
// tensor Resize (antialias=True).
torch::Tensor resize_exact(const torch::Tensor& image, int64_t out_height, int64_t out_width);

// Training: RandomResizedCrop(size) then RandomHorizontalFlip(0.5) (when `flip`).
torch::Tensor train_image_transform(const torch::Tensor& image, int64_t size, bool flip,
                                    std::mt19937_64& rng, const ResizedCropOptions& options = {});

// Evaluation: Resize(round(size / crop_pct)) of the shorter side, CenterCrop(size).
torch::Tensor eval_image_transform(const torch::Tensor& image, int64_t size, double crop_pct);

// timm's and torchvision's reference recipe's evaluation crop fraction (224 of 256).
inline constexpr double kDefaultCropPct = 0.875;

}  // namespace ddpx::data
