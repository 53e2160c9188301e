// MobileNetV2, mirroring torchvision/models/mobilenetv2.py (0.14).
#include "models/mobilenet.h"

#include <fmt/ranges.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <cmath>

#include "core/error.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kFirstChannels = 32;
constexpr int64_t kLastChannels = 1280;

struct StageSetting {
  int64_t expand_ratio, channels, blocks, stride;  // torchvision's t, c, n, s
};
constexpr StageSetting kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                    {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};

}  // namespace

ConvBnReLU6Impl::ConvBnReLU6Impl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                 int64_t groups) {
  conv = register_module("0", nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                                             .stride(stride)
                                             .padding((kernel - 1) / 2)
                                             .groups(groups)
                                             .bias(false)));
  bn = register_module("1", BatchNorm(out));
  relu6 = register_module("2", nn::ReLU6(nn::ReLU6Options().inplace(true)));
}

torch::Tensor ConvBnReLU6Impl::forward(torch::Tensor x) { return relu6(bn(conv(x))); }

InvertedResidualImpl::InvertedResidualImpl(int64_t in, int64_t out, int64_t stride,
                                           int64_t expand_ratio) {
  const int64_t hidden = static_cast<int64_t>(std::round(static_cast<double>(in * expand_ratio)));
  use_residual_ = stride == 1 && in == out;
  nn::Sequential layers;
  if (expand_ratio != 1) layers->push_back(ConvBnReLU6(in, hidden, 1));
  layers->push_back(ConvBnReLU6(hidden, hidden, 3, stride, /*groups=*/hidden));  // depthwise
  layers->push_back(nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));  // linear
  layers->push_back(BatchNorm(out));
  conv = register_module("conv", layers);
}

torch::Tensor InvertedResidualImpl::forward(torch::Tensor x) {
  return use_residual_ ? x + conv->forward(x) : conv->forward(x);
}

MobileNetV2Impl::MobileNetV2Impl(int64_t num_classes, double dropout) {
  DDPX_CHECK(num_classes >= 1, ErrorKind::kUsage,
             "MobileNetV2 num_classes is {}; expected at least 1", num_classes);
  nn::Sequential layers;
  layers->push_back(ConvBnReLU6(3, kFirstChannels, 3, /*stride=*/2));
  int64_t channels = kFirstChannels;
  for (const StageSetting& stage : kStages) {
    for (int64_t i = 0; i < stage.blocks; ++i) {
      layers->push_back(InvertedResidual(channels, stage.channels, i == 0 ? stage.stride : 1,
                                         stage.expand_ratio));
      channels = stage.channels;
    }
  }
  layers->push_back(ConvBnReLU6(channels, kLastChannels, 1));
  features = register_module("features", layers);
  classifier = register_module(
      "classifier", nn::Sequential(nn::Dropout(dropout), nn::Linear(kLastChannels, num_classes)));

  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kNormal});
}

torch::Tensor MobileNetV2Impl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3, ErrorKind::kUsage,
             "MobileNetV2 expects input of shape (B, 3, H, W), got {}; convert grayscale images "
             "to 3 channels first",
             fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = features->forward(x);       // (B, 1280, H/32, W/32)
  x = x.mean({2, 3});             // (B, 1280)
  return classifier->forward(x);  // (B, num_classes)
}

}  // namespace ddpx::models
