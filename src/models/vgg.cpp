// VGG, mirroring torchvision/models/vgg.py (0.14).
#include "models/vgg.h"

#include <fmt/ranges.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "core/error.h"
#include "models/batch_norm.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kPool = 0;  // "M" in torchvision's configuration lists
constexpr int64_t kPooledSize = 7;
constexpr int64_t kHidden = 4096;

// torchvision's cfgs A, B, D, E.
std::vector<int64_t> configuration(int64_t depth) {
  const int64_t M = kPool;
  switch (depth) {
    case 11:
      return {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 13:
      return {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 16:
      return {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
    case 19:
      return {64,  64,  M,   128, 128, M,   256, 256, 256, 256, M,
              512, 512, 512, 512, M,   512, 512, 512, 512, M};
    default:
      fail(ErrorKind::kInternal, "VGG depth {} is not one of 11, 13, 16, 19", depth);
  }
}

}  // namespace

VggImpl::VggImpl(const VggOptions& options) {
  DDPX_CHECK(options.num_classes >= 1, ErrorKind::kUsage,
             "VGG num_classes is {}; expected at least 1", options.num_classes);
  nn::Sequential layers;
  int64_t channels = 3;
  for (int64_t v : configuration(options.depth)) {
    if (v == kPool) {
      layers->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
      continue;
    }
    layers->push_back(nn::Conv2d(nn::Conv2dOptions(channels, v, 3).padding(1)));
    if (options.batch_norm) layers->push_back(BatchNorm(v));
    layers->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
    channels = v;
  }
  features = register_module("features", layers);
  avgpool = register_module(
      "avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({kPooledSize, kPooledSize})));
  classifier = register_module(
      "classifier",
      nn::Sequential(nn::Linear(512 * kPooledSize * kPooledSize, kHidden), nn::ReLU(true),
                     nn::Dropout(options.dropout), nn::Linear(kHidden, kHidden), nn::ReLU(true),
                     nn::Dropout(options.dropout), nn::Linear(kHidden, options.num_classes)));

  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kNormal});
}

torch::Tensor VggImpl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3 && x.size(2) >= 32 && x.size(3) >= 32,
             ErrorKind::kUsage,
             "VGG expects input of shape (B, 3, H, W) with H, W >= 32 (five 2x2 max-pools), got "
             "{}; resize with --image_size 32 or larger",
             fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = features->forward(x);           // (B, 512, H/32, W/32)
  x = torch::flatten(avgpool(x), 1);  // (B, 512 * 7 * 7)
  return classifier->forward(x);      // (B, num_classes)
}

int64_t vgg_parameter_count(const VggOptions& options) {
  int64_t total = 0;
  int64_t channels = 3;
  for (int64_t v : configuration(options.depth)) {
    if (v == kPool) continue;
    total += v * channels * 9 + v + (options.batch_norm ? 2 * v : 0);
    channels = v;
  }
  const int64_t flat = 512 * kPooledSize * kPooledSize;
  return total + (flat + 1) * kHidden + (kHidden + 1) * kHidden +
         (kHidden + 1) * options.num_classes;
}

}  // namespace ddpx::models
