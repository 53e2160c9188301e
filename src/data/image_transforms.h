// torchvision's transforms for images of any size, on one decoded (H, W, 3) uint8 image:
// training RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) with get_params' sampling
// (ten tries of an area fraction, uniform, and a log-uniform aspect ratio; then the centre crop
// clamped to the ratio range) and RandomHorizontalFlip; evaluation Resize(round(size / crop_pct))
// of the shorter side and CenterCrop(size). The resize is the `exact` mode: torchvision's
// tensor path (`interpolate(..., mode="bilinear", antialias=True)` on float, rounded back to
// uint8), so given the same crop the pixels equal torchvision's. Random draws come from the
// stream the caller passes (the loader's, seeded by seed, epoch and sample), in a fixed order:
// the area and ratio of each try, the top, the left, then the flip.
// The `fast` mode (the default) draws the same boxes from the same streams but decodes only the
// crop (a JPEG's rows and columns it covers, at the largest DCT scale 1/2, 1/4 or 1/8 that keeps
// it at least the output size) and resizes on uint8 (ATen's vectorised antialiased bilinear):
// the pixels differ from `exact` by the DCT scaling and the rounding (docs/data.md's tolerance).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

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

// The same as resize_exact on uint8 throughout (ATen's channels-last uint8 kernel): within one
// level of it, several times faster.
torch::Tensor resize_fast(const torch::Tensor& image, int64_t out_height, int64_t out_width);

// The largest DCT down-scaling (8, 4, 2 or 1) that leaves a height x width crop at least
// out_height x out_width.
int dct_scale(int64_t height, int64_t width, int64_t out_height, int64_t out_width);

// Training: RandomResizedCrop(size) then RandomHorizontalFlip(0.5) (when `flip`).
torch::Tensor train_image_transform(const torch::Tensor& image, int64_t size, bool flip,
                                    std::mt19937_64& rng, const ResizedCropOptions& options = {});

// Evaluation: Resize(round(size / crop_pct)) of the shorter side, CenterCrop(size).
torch::Tensor eval_image_transform(const torch::Tensor& image, int64_t size, double crop_pct);

// The fast mode's crop and resize of the encoded image: `box` (in the full image) decoded at
// dct_scale, then resize_fast to out_height x out_width.
torch::Tensor resized_crop_fast(std::string_view bytes, const std::string& source,
                                const CropBox& box, int64_t out_height, int64_t out_width);

// The fast mode's training and evaluation transforms, from the encoded image (header first, then
// only what the box needs); the same draws from `rng` as the exact ones.
torch::Tensor train_image_transform_fast(std::string_view bytes, const std::string& source,
                                         int64_t size, bool flip, std::mt19937_64& rng,
                                         const ResizedCropOptions& options = {});
torch::Tensor eval_image_transform_fast(std::string_view bytes, const std::string& source,
                                        int64_t size, double crop_pct);

// timm's and torchvision's reference recipe's evaluation crop fraction (224 of 256).
inline constexpr double kDefaultCropPct = 0.875;

}  // namespace ddpx::data
