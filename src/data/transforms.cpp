#include "data/transforms.h"

#include <torch/nn/functional/upsampling.h>

#include <cstring>

#include "core/error.h"

namespace ddpx::data {
namespace {

// A gray image uses ImageNet's channel averages.
constexpr float kImagenetGrayMean = 0.449f;
constexpr float kImagenetGrayStd = 0.226f;

// Random crop after zero padding plus an optional flip, in one pass over uint8 bytes.
// images: (B, H, W, C) contiguous uint8.
torch::Tensor augment(const torch::Tensor& images, const TransformOptions& options,
                      std::mt19937_64& rng) {
  const int64_t b = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  const int64_t pad = options.random_crop ? options.crop_padding : 0;
  auto out = torch::zeros_like(images);
  const uint8_t* in = images.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  std::uniform_int_distribution<int64_t> offset(0, 2 * pad);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < b; ++i) {
    // Draw order (dy, dx, flip) is part of the determinism contract.
    int64_t dy = options.random_crop ? offset(rng) - pad : 0;
    int64_t dx = options.random_crop ? offset(rng) - pad : 0;
    bool flip = options.horizontal_flip && coin(rng);
    const uint8_t* src = in + i * h * w * c;
    uint8_t* img = dst + i * h * w * c;
    for (int64_t y = 0; y < h; ++y) {
      int64_t sy = y + dy;
      if (sy < 0 || sy >= h) continue;  // padding rows stay zero
      for (int64_t x = 0; x < w; ++x) {
        // Crop first (output x reads padded column x + dx), then flip the crop.
        int64_t sx = (flip ? w - 1 - x : x) + dx;
        if (sx < 0 || sx >= w) continue;
        std::memcpy(img + (y * w + x) * c, src + (sy * w + sx) * c, c);
      }
    }
  }
  return out;
}

torch::Tensor erase(torch::Tensor x, const TransformOptions& options, std::mt19937_64& rng) {
  if (options.random_erasing.probability > 0) random_erase_(x, options.random_erasing, rng);
  return x;
}

}  // namespace

void normalization(const TransformOptions& options, int64_t c, std::vector<float>& mean,
                   std::vector<float>& std) {
  mean.assign(c, 0.f);
  std.assign(c, 1.f);
  switch (options.normalize) {
    case Normalize::kNone:
      break;
    case Normalize::kNegOneOne:
      std::fill(mean.begin(), mean.end(), 0.5f);
      std::fill(std.begin(), std.end(), 0.5f);
      break;
    case Normalize::kImagenet:
      for (int64_t i = 0; i < c; ++i) {
        mean[i] = c == 3 ? kImagenetMean[i] : kImagenetGrayMean;
        std[i] = c == 3 ? kImagenetStd[i] : kImagenetGrayStd;
      }
      break;
    case Normalize::kDataset: {
      const auto& m = options.dataset_mean;
      const auto& s = options.dataset_std;
      // Gray statistics repeat over the 3 channels a gray image is expanded to.
      DDPX_CHECK(m.size() == s.size() && (static_cast<int64_t>(m.size()) == c || m.size() == 1),
                 ErrorKind::kInternal,
                 "dataset normalization has {} means and {} stds for {} "
                 "channels; pass DatasetSplits::mean/std",
                 m.size(), s.size(), c);
      for (int64_t i = 0; i < c; ++i) {
        mean[i] = m.size() == 1 ? m[0] : m[i];
        std[i] = s.size() == 1 ? s[0] : s[i];
      }
      break;
    }
  }
}

void normalize_into(const uint8_t* image, int64_t height, int64_t width, const float* mean,
                    const float* std, float* out) {
  const int64_t plane = height * width;
  // One plane at a time: each output is written once, in order (the batch is the big buffer).
  for (int c = 0; c < 3; ++c) {
    float* dst = out + c * plane;
    const uint8_t* src = image + c;
    const float m = mean[c], s = std[c];
    for (int64_t i = 0; i < plane; ++i) dst[i] = (static_cast<float>(src[3 * i]) / 255.f - m) / s;
  }
}

torch::Tensor transform_batch(const torch::Tensor& images, const TransformOptions& options,
                              std::mt19937_64& rng) {
  DDPX_CHECK(images.dim() == 4 && images.scalar_type() == torch::kUInt8, ErrorKind::kInternal,
             "transform_batch expects (B, H, W, C) uint8, got {} dims", images.dim());
  const int64_t in_channels = images.size(3);
  DDPX_CHECK(options.out_channels == in_channels || (in_channels == 1 && options.out_channels == 3),
             ErrorKind::kUsage, "cannot turn {}-channel images into {} channels", in_channels,
             options.out_channels);
  DDPX_CHECK(options.crop_padding >= 0 && options.image_size >= 0, ErrorKind::kUsage,
             "crop padding {} and image size {} must be >= 0", options.crop_padding,
             options.image_size);
  torch::Tensor x = images.contiguous();
  if (options.random_crop || options.horizontal_flip) x = augment(x, options, rng);
  // x: (B, H, W, C) uint8 -> (B, C, H, W) float in [0, 1]
  x = x.permute({0, 3, 1, 2}).to(torch::kFloat32).div_(255.f);
  const int64_t size = options.image_size;
  if (size > 0 && (size != x.size(2) || size != x.size(3))) {
    namespace F = torch::nn::functional;
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{options.image_size, options.image_size})
                              .mode(torch::kBilinear)
                              .align_corners(false));
  }
  if (options.out_channels == 3 && in_channels == 1) x = x.expand({-1, 3, -1, -1});
  const int64_t c = options.out_channels;
  std::vector<float> mean, std;
  if (options.normalize == Normalize::kNone) return erase(x.contiguous(), options, rng);
  normalization(options, c, mean, std);
  auto mean_t = torch::tensor(mean).view({1, c, 1, 1});
  auto std_t = torch::tensor(std).view({1, c, 1, 1});
  return erase(((x - mean_t) / std_t).contiguous(), options, rng);
}

}  // namespace ddpx::data
