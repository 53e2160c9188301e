#include "data/image_transforms.h"

#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <torch/nn/functional/upsampling.h>

#include <cmath>

#include "core/error.h"
#include "io/image.h"

namespace ddpx::data {
namespace transforms_detail {

// Python's round(): halves to even (the default floating-point rounding mode).
int64_t py_round(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

torch::Tensor crop(const torch::Tensor& image, const CropBox& box) {
  return image.slice(0, box.top, box.top + box.height).slice(1, box.left, box.left + box.width);
}

// Resize(round(size / crop_pct)) of the shorter side: the new (height, width).
std::pair<int64_t, int64_t> eval_resized(int64_t h, int64_t w, int64_t size, double crop_pct) {
  DDPX_CHECK(crop_pct > 0 && crop_pct <= 1, ErrorKind::kUsage,
             "crop fraction {}: expected a value in (0, 1]", crop_pct);
  // The shorter side to `short`, the longer int(short * long / shorter).
  const int64_t short_side = py_round(static_cast<double>(size) / crop_pct);
  if (w <= h) return {static_cast<int64_t>(static_cast<double>(short_side) * h / w), short_side};
  return {short_side, static_cast<int64_t>(static_cast<double>(short_side) * w / h)};
}

torch::Tensor center_crop(const torch::Tensor& image, int64_t size) {
  const CropBox box{py_round((image.size(0) - size) / 2.0), py_round((image.size(1) - size) / 2.0),
                    size, size};
  return crop(image, box).contiguous();
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
  const auto [new_h, new_w] =
      transforms_detail::eval_resized(image.size(0), image.size(1), size, crop_pct);
  return transforms_detail::center_crop(resize_exact(image, new_h, new_w), size);
}

torch::Tensor resize_fast(const torch::Tensor& image, int64_t out_height, int64_t out_width) {
  if (image.size(0) == out_height && image.size(1) == out_width) return image.contiguous();
  // x: (1, 3, H, W) uint8 viewed channels-last on the (H, W, 3) bytes: ATen's AVX2 kernel for
  // uint8 antialiased resampling takes exactly this layout (no conversion, no copy).
  const auto x = image.contiguous().permute({2, 0, 1}).unsqueeze(0);
  const auto y = at::_upsample_bilinear2d_aa(x, {out_height, out_width}, /*align_corners=*/false,
                                             std::nullopt, std::nullopt);
  return y.squeeze(0).permute({1, 2, 0}).contiguous();
}

int dct_scale(int64_t height, int64_t width, int64_t out_height, int64_t out_width) {
  int scale = 8;
  while (scale > 1 && (height < scale * out_height || width < scale * out_width)) scale /= 2;
  return scale;
}

torch::Tensor resized_crop_fast(std::string_view bytes, const std::string& source,
                                const CropBox& box, int64_t out_height, int64_t out_width) {
  const io::ImageRegion region{box.top, box.left, box.height, box.width,
                               dct_scale(box.height, box.width, out_height, out_width)};
  return resize_fast(io::decode_image_region(bytes, source, region).pixels, out_height, out_width);
}

torch::Tensor train_image_transform_fast(std::string_view bytes, const std::string& source,
                                         int64_t size, bool flip, std::mt19937_64& rng,
                                         const ResizedCropOptions& options) {
  const io::ImageInfo info = io::read_image_info(bytes, source);
  const CropBox box = random_resized_crop_box(info.height, info.width, rng, options);
  auto out = resized_crop_fast(bytes, source, box, size, size);
  if (flip && std::bernoulli_distribution(0.5)(rng)) out = out.flip({1});
  return out;
}

torch::Tensor eval_image_transform_fast(std::string_view bytes, const std::string& source,
                                        int64_t size, double crop_pct) {
  const io::ImageInfo info = io::read_image_info(bytes, source);
  const auto [new_h, new_w] =
      transforms_detail::eval_resized(info.height, info.width, size, crop_pct);
  // The whole image at the scale that keeps it at least the resized size, then as exact does.
  const io::ImageRegion whole{0, 0, info.height, info.width,
                              dct_scale(info.height, info.width, new_h, new_w)};
  const torch::Tensor image = io::decode_image_region(bytes, source, whole).pixels;
  return transforms_detail::center_crop(resize_fast(image, new_h, new_w), size);
}

}  // namespace ddpx::data
