// MobileNetV3, mirroring torchvision/models/mobilenetv3.py and ops/misc.py (0.14).
#include "models/mobilenet_v3.h"

#include <fmt/ranges.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr double kBatchNormEps = 1e-3;
constexpr double kBatchNormMomentum = 0.01;
constexpr int64_t kChannelDivisor = 8;
constexpr int64_t kLastConvExpansion = 6;  // last 1x1 conv: 6x the last block's channels

// torchvision's inverted_residual_setting: in, kernel, expanded, out, SE, hardswish, stride.
const std::vector<BneckConfig>& block_table(bool large) {
  static const std::vector<BneckConfig> kLarge = {
      {16, 3, 16, 16, false, false, 1},  {16, 3, 64, 24, false, false, 2},
      {24, 3, 72, 24, false, false, 1},  {24, 5, 72, 40, true, false, 2},
      {40, 5, 120, 40, true, false, 1},  {40, 5, 120, 40, true, false, 1},
      {40, 3, 240, 80, false, true, 2},  {80, 3, 200, 80, false, true, 1},
      {80, 3, 184, 80, false, true, 1},  {80, 3, 184, 80, false, true, 1},
      {80, 3, 480, 112, true, true, 1},  {112, 3, 672, 112, true, true, 1},
      {112, 5, 672, 160, true, true, 2}, {160, 5, 960, 160, true, true, 1},
      {160, 5, 960, 160, true, true, 1}};
  static const std::vector<BneckConfig> kSmall = {
      {16, 3, 16, 16, true, false, 2},  {16, 3, 72, 24, false, false, 2},
      {24, 3, 88, 24, false, false, 1}, {24, 5, 96, 40, true, true, 2},
      {40, 5, 240, 40, true, true, 1},  {40, 5, 240, 40, true, true, 1},
      {40, 5, 120, 48, true, true, 1},  {48, 5, 144, 48, true, true, 1},
      {48, 5, 288, 96, true, true, 2},  {96, 5, 576, 96, true, true, 1},
      {96, 5, 576, 96, true, true, 1}};
  return large ? kLarge : kSmall;
}

int64_t last_channel(bool large) { return large ? 1280 : 1024; }

// torchvision's _make_divisible: round to a multiple of 8, never more than 10% down.
int64_t make_divisible(int64_t v) {
  int64_t rounded =
      std::max(kChannelDivisor, (v + kChannelDivisor / 2) / kChannelDivisor * kChannelDivisor);
  if (10 * rounded < 9 * v) rounded += kChannelDivisor;
  return rounded;
}

int64_t squeeze_channels(int64_t expanded) { return make_divisible(expanded / 4); }

torch::Tensor hardswish(torch::Tensor x) { return torch::hardswish(x); }

}  // namespace

ConvBnActImpl::ConvBnActImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                             int64_t groups, Activation activation)
    : activation_(activation) {
  conv = register_module("0", nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                                             .stride(stride)
                                             .padding((kernel - 1) / 2)
                                             .groups(groups)
                                             .bias(false)));
  bn = register_module(
      "1", BatchNorm(nn::BatchNorm2dOptions(out).eps(kBatchNormEps).momentum(kBatchNormMomentum)));
}

torch::Tensor ConvBnActImpl::forward(torch::Tensor x) {
  x = bn(conv(x));
  switch (activation_) {
    case Activation::kReLU:
      return torch::relu(x);
    case Activation::kHardswish:
      return torch::hardswish(x);
    case Activation::kNone:
      break;
  }
  return x;
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t channels, int64_t squeeze) {
  fc1 = register_module("fc1", nn::Conv2d(nn::Conv2dOptions(channels, squeeze, 1)));
  fc2 = register_module("fc2", nn::Conv2d(nn::Conv2dOptions(squeeze, channels, 1)));
}

torch::Tensor SqueezeExcitationImpl::forward(torch::Tensor x) {
  torch::Tensor scale = x.mean({2, 3}, /*keepdim=*/true);  // (B, C, 1, 1)
  scale = torch::hardsigmoid(fc2(torch::relu(fc1(scale))));
  return scale * x;
}

InvertedResidualV3Impl::InvertedResidualV3Impl(const BneckConfig& c) {
  use_residual_ = c.stride == 1 && c.in == c.out;
  const Activation activation = c.use_hardswish ? Activation::kHardswish : Activation::kReLU;
  nn::Sequential layers;
  if (c.expanded != c.in) layers->push_back(ConvBnAct(c.in, c.expanded, 1, 1, 1, activation));
  layers->push_back(
      ConvBnAct(c.expanded, c.expanded, c.kernel, c.stride, /*groups=*/c.expanded, activation));
  if (c.use_se) layers->push_back(SqueezeExcitation(c.expanded, squeeze_channels(c.expanded)));
  layers->push_back(ConvBnAct(c.expanded, c.out, 1, 1, 1, Activation::kNone));
  block = register_module("block", layers);
}

torch::Tensor InvertedResidualV3Impl::forward(torch::Tensor x) {
  return use_residual_ ? block->forward(x) + x : block->forward(x);
}

MobileNetV3Impl::MobileNetV3Impl(const MobileNetV3Options& options) {
  DDPX_CHECK(options.num_classes >= 1, ErrorKind::kUsage,
             "MobileNetV3 num_classes is {}; expected at least 1", options.num_classes);
  const std::vector<BneckConfig>& blocks = block_table(options.large);
  nn::Sequential layers;
  layers->push_back(ConvBnAct(3, blocks.front().in, 3, /*stride=*/2, 1, Activation::kHardswish));
  for (const BneckConfig& c : blocks) layers->push_back(InvertedResidualV3(c));
  const int64_t last_in = blocks.back().out;
  const int64_t last_out = kLastConvExpansion * last_in;
  layers->push_back(ConvBnAct(last_in, last_out, 1, 1, 1, Activation::kHardswish));
  features = register_module("features", layers);
  const int64_t hidden = last_channel(options.large);
  classifier = register_module(
      "classifier",
      nn::Sequential(nn::Linear(last_out, hidden), nn::Functional(hardswish),
                     nn::Dropout(options.dropout), nn::Linear(hidden, options.num_classes)));

  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kNormal});
}

torch::Tensor MobileNetV3Impl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3, ErrorKind::kUsage,
             "MobileNetV3 expects input of shape (B, 3, H, W), got {}; convert grayscale images "
             "to 3 channels first",
             fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = features->forward(x);       // (B, 6 * out, H/32, W/32)
  x = x.mean({2, 3});             // (B, 6 * out)
  return classifier->forward(x);  // (B, num_classes)
}

int64_t mobilenet_v3_parameter_count(const MobileNetV3Options& options) {
  const auto conv_bn = [](int64_t in, int64_t out, int64_t kernel, int64_t groups) {
    return in / groups * out * kernel * kernel + 2 * out;
  };
  const std::vector<BneckConfig>& blocks = block_table(options.large);
  int64_t total = conv_bn(3, blocks.front().in, 3, 1);
  for (const BneckConfig& c : blocks) {
    if (c.expanded != c.in) total += conv_bn(c.in, c.expanded, 1, 1);
    total += conv_bn(c.expanded, c.expanded, c.kernel, c.expanded);
    if (c.use_se) {
      const int64_t s = squeeze_channels(c.expanded);
      total += (c.expanded + 1) * s + (s + 1) * c.expanded;  // fc1, fc2 with biases
    }
    total += conv_bn(c.expanded, c.out, 1, 1);
  }
  const int64_t last_in = blocks.back().out;
  const int64_t last_out = kLastConvExpansion * last_in;
  const int64_t hidden = last_channel(options.large);
  return total + conv_bn(last_in, last_out, 1, 1) + (last_out + 1) * hidden +
         (hidden + 1) * options.num_classes;
}

}  // namespace ddpx::models
