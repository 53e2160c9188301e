#include "data/image_transforms.h"

#include <torch/nn/functional/upsampling.h>

#include <cmath>

#include "core/error.h"

namespace ddpx::data {
namespace transforms_detail {

// Python's round(): halves to even (the default floating-point rounding mode).
int64_t py_round(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

torch::Tensor crop(const torch::Tensor& image, const CropBox& box) {
  return image.slice(0, box.top, box.top + box.height).slice(1, box.left, box.left + box.width);
}

}  // namespace transforms_detail

CropBox random_resized_crop_box(int64_t height, int64_t width, std::mt19937_64& rng,
                                const ResizedCropOptions& o) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  std::uniform_real_distribution<double> scale(o.scale_min, o.scale_max);
  std::uniform_real_distribution<double> log_ratio(std::log(o.ratio_min), std::log(o.ratio_max));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * scale(rng);
    const double aspect = std::exp(log_ratio(rng));
    const int64_t w = transforms_detail::py_round(std::sqrt(target_area * aspect));
    const int64_t h = transforms_detail::py_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = std::uniform_int_distribution<int64_t>(0, height - h)(rng);
      const int64_t left = std::uniform_int_distribution<int64_t>(0, width - w)(rng);
      return {top, left, h, w, false};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = transforms_detail::py_round(static_cast<double>(w) / o.ratio_min);
  } else if (in_ratio > o.ratio_max) {
    w = transforms_detail::py_round(static_cast<double>(h) * o.ratio_max);
  }
  return {(height - h) / 2, (width - w) / 2, h, w, true};
}

torch::Tensor resize_exact(const torch::Tensor& image, int64_t out_height, int64_t out_width) {
  if (image.size(0) == out_height && image.size(1) == out_width) return image;
  namespace F = torch::nn::functional;
  // x: (1, 3, H, W) float, contiguous as torchvision's (C, H, W) tensor after unsqueeze.
  auto x = image.permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32).contiguous();
  x = F::interpolate(x, F::InterpolateFuncOptions()
                            .size(std::vector<int64_t>{out_height, out_width})
                            .mode(torch::kBilinear)
                            .align_corners(false)
                            .antialias(true));
  return x.round_().to(torch::kUInt8).squeeze(0).permute({1, 2, 0}).contiguous();
}

torch::Tensor train_image_transform(const torch::Tensor& image, int64_t size, bool flip,
                                    std::mt19937_64& rng, const ResizedCropOptions& options) {
  const CropBox box = random_resized_crop_box(image.size(0), image.size(1), rng, options);
  auto out = resize_exact(transforms_detail::crop(image, box), size, size);
  if (flip && std::bernoulli_distribution(0.5)(rng)) out = out.flip({1});
  return out;
}

torch::Tensor eval_image_transform(const torch::Tensor& image, int64_t size, double crop_pct) {
  DDPX_CHECK(crop_pct > 0 && crop_pct <= 1, ErrorKind::kUsage,
             "crop fraction {}: expected a value in (0, 1]", crop_pct);
  const int64_t h = image.size(0), w = image.size(1);
  // Resize(short): the shorter side to `short`, the longer int(short * long / shorter).
  const int64_t short_side = transforms_detail::py_round(static_cast<double>(size) / crop_pct);
  int64_t new_h = short_side, new_w = short_side;
  if (w <= h)
    new_h = static_cast<int64_t>(static_cast<double>(short_side) * h / w);
  else
    new_w = static_cast<int64_t>(static_cast<double>(short_side) * w / h);
  auto resized = resize_exact(image, new_h, new_w);
  const CropBox box{transforms_detail::py_round((new_h - size) / 2.0),
                    transforms_detail::py_round((new_w - size) / 2.0), size, size};
  return transforms_detail::crop(resized, box).contiguous();
}

}  // namespace ddpx::data
