// EfficientNet B0-B7, mirroring torchvision/models/efficientnet.py (0.14).
#include "models/efficientnet.h"

#include <fmt/ranges.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kDivisor = 8;
constexpr int kVariants = 8;

struct StageSetting {
  int64_t expand_ratio, kernel, stride, in, out, layers;  // torchvision's bneck_conf arguments
};
constexpr StageSetting kStages[] = {
    {1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},  {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1}};

struct Variant {
  double width, depth, dropout;
  int64_t image_size;
  bool tf_batch_norm;  // eps 1e-3, momentum 0.01
};
constexpr Variant kVariantTable[kVariants] = {
    {1.0, 1.0, 0.2, 224, false}, {1.0, 1.1, 0.2, 240, false}, {1.1, 1.2, 0.3, 288, false},
    {1.2, 1.4, 0.3, 300, false}, {1.4, 1.8, 0.4, 380, false}, {1.6, 2.2, 0.4, 456, true},
    {1.8, 2.6, 0.5, 528, true},  {2.0, 3.1, 0.5, 600, true}};

// torchvision's _make_divisible(v, 8): round to a multiple of 8, never 10% below v.
int64_t make_divisible(double v) {
  int64_t rounded =
      std::max<int64_t>(kDivisor, static_cast<int64_t>(v + kDivisor / 2.0) / kDivisor * kDivisor);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += kDivisor;
  return rounded;
}

int64_t adjust_channels(int64_t channels, double mult) {
  return make_divisible(static_cast<double>(channels) * mult);
}

struct BlockSpec {
  int64_t in, out, kernel, stride, expand_ratio;
  double stochastic_depth_prob;
};

// Every MBConv block in order, as torchvision's EfficientNet.__init__ lays them out.
std::vector<std::vector<BlockSpec>> block_specs(const EfficientNetOptions& o) {
  int64_t total = 0;
  for (const StageSetting& s : kStages) {
    total += static_cast<int64_t>(std::ceil(static_cast<double>(s.layers) * o.depth_mult));
  }
  std::vector<std::vector<BlockSpec>> stages;
  int64_t block_id = 0;
  for (const StageSetting& s : kStages) {
    const int64_t layers =
        static_cast<int64_t>(std::ceil(static_cast<double>(s.layers) * o.depth_mult));
    const int64_t in = adjust_channels(s.in, o.width_mult);
    const int64_t out = adjust_channels(s.out, o.width_mult);
    std::vector<BlockSpec> stage;
    for (int64_t i = 0; i < layers; ++i) {
      const double p =
          o.stochastic_depth_prob * static_cast<double>(block_id) / static_cast<double>(total);
      stage.push_back({i == 0 ? in : out, out, s.kernel, i == 0 ? s.stride : 1, s.expand_ratio, p});
      ++block_id;
    }
    stages.push_back(std::move(stage));
  }
  return stages;
}

BatchNorm batch_norm(int64_t channels, const EfficientNetOptions& o) {
  return BatchNorm(nn::BatchNorm2dOptions(channels).eps(o.bn_eps).momentum(o.bn_momentum));
}

const Variant& variant_at(int variant) {
  DDPX_CHECK(variant >= 0 && variant < kVariants, ErrorKind::kInternal,
             "EfficientNet variant b{} does not exist; expected b0..b7", variant);
  return kVariantTable[variant];
}

}  // namespace

ConvBnSiLUImpl::ConvBnSiLUImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                               int64_t groups, bool activation,
                               const EfficientNetOptions& options) {
  conv = register_module("0", nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                                             .stride(stride)
                                             .padding((kernel - 1) / 2)
                                             .groups(groups)
                                             .bias(false)));
  bn = register_module("1", batch_norm(out, options));
  if (activation) act = register_module("2", nn::SiLU());
}

torch::Tensor ConvBnSiLUImpl::forward(torch::Tensor x) {
  x = bn(conv(x));
  return act ? act(x) : x;
}

MBConvSqueezeExcitationImpl::MBConvSqueezeExcitationImpl(int64_t channels,
                                                         int64_t squeeze_channels) {
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
  fc1 = register_module("fc1", nn::Conv2d(nn::Conv2dOptions(channels, squeeze_channels, 1)));
  fc2 = register_module("fc2", nn::Conv2d(nn::Conv2dOptions(squeeze_channels, channels, 1)));
  activation = register_module("activation", nn::SiLU());
  scale_activation = register_module("scale_activation", nn::Sigmoid());
}

torch::Tensor MBConvSqueezeExcitationImpl::forward(torch::Tensor x) {
  // scale: (B, C, 1, 1), one gate per channel
  const torch::Tensor scale =
      scale_activation(fc2(activation(fc1(x.mean({2, 3}, /*keepdim=*/true)))));
  return scale * x;
}

MBConvImpl::MBConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                       int64_t expand_ratio, double stochastic_depth_prob,
                       const EfficientNetOptions& options)
    : stochastic_depth_prob_(stochastic_depth_prob) {
  use_residual_ = stride == 1 && in == out;
  const int64_t expanded = adjust_channels(in, static_cast<double>(expand_ratio));
  nn::Sequential layers;
  if (expanded != in) layers->push_back(ConvBnSiLU(in, expanded, 1, 1, 1, true, options));
  layers->push_back(ConvBnSiLU(expanded, expanded, kernel, stride, /*groups=*/expanded,
                               /*activation=*/true, options));  // depthwise
  layers->push_back(MBConvSqueezeExcitation(expanded, std::max<int64_t>(1, in / 4)));
  layers->push_back(ConvBnSiLU(expanded, out, 1, 1, 1, /*activation=*/false, options));
  block = register_module("block", layers);
}

torch::Tensor MBConvImpl::forward(torch::Tensor x) {
  torch::Tensor result = block->forward(x);
  if (!use_residual_) return result;
  return stochastic_depth_rows(result, stochastic_depth_prob_, is_training()) + x;
}

torch::Tensor stochastic_depth_rows(const torch::Tensor& x, double p, bool training) {
  DDPX_CHECK(p >= 0.0 && p <= 1.0, ErrorKind::kUsage,
             "stochastic depth probability is {}; expected a value in [0, 1]", p);
  if (!training || p == 0.0) return x;
  const double survival = 1.0 - p;
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = x.size(0);  // one draw per sample ("row" mode)
  torch::Tensor noise = torch::empty(shape, x.options()).bernoulli_(survival);
  if (survival > 0.0) noise.div_(survival);
  return x * noise;
}

EfficientNetImpl::EfficientNetImpl(const EfficientNetOptions& options) {
  DDPX_CHECK(options.num_classes >= 1, ErrorKind::kUsage,
             "EfficientNet num_classes is {}; expected at least 1", options.num_classes);
  const auto stages = block_specs(options);
  nn::Sequential layers;
  const int64_t first = stages.front().front().in;
  layers->push_back(ConvBnSiLU(3, first, 3, /*stride=*/2, 1, true, options));
  for (const auto& stage : stages) {
    MBConvStage blocks;
    for (const BlockSpec& b : stage) {
      blocks->push_back(MBConv(b.in, b.out, b.kernel, b.stride, b.expand_ratio,
                               b.stochastic_depth_prob, options));
    }
    layers->push_back(blocks);
  }
  const int64_t last_in = stages.back().back().out;
  const int64_t last = 4 * last_in;
  layers->push_back(ConvBnSiLU(last_in, last, 1, 1, 1, true, options));
  features = register_module("features", layers);
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
  classifier = register_module("classifier", nn::Sequential(nn::Dropout(options.dropout),
                                                            nn::Linear(last, options.num_classes)));

  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kUniform});
}

torch::Tensor EfficientNetImpl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3, ErrorKind::kUsage,
             "EfficientNet expects input of shape (B, 3, H, W), got {}; convert grayscale images "
             "to 3 channels first",
             fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = features->forward(x);       // (B, 4 * C_last, H/32, W/32)
  x = x.mean({2, 3});             // (B, 4 * C_last); see resnet.cpp
  return classifier->forward(x);  // (B, num_classes)
}

EfficientNetOptions efficientnet_options(int variant) {
  const Variant& v = variant_at(variant);
  EfficientNetOptions o;
  o.width_mult = v.width;
  o.depth_mult = v.depth;
  o.dropout = v.dropout;
  if (v.tf_batch_norm) {
    o.bn_eps = 1e-3;
    o.bn_momentum = 0.01;
  }
  return o;
}

int64_t efficientnet_image_size(int variant) { return variant_at(variant).image_size; }

int64_t efficientnet_parameter_count(const EfficientNetOptions& options) {
  auto conv_bn = [](int64_t in, int64_t out, int64_t kernel, int64_t groups) {
    return out * (in / groups) * kernel * kernel + 2 * out;
  };
  const auto stages = block_specs(options);
  const int64_t first = stages.front().front().in;
  int64_t total = conv_bn(3, first, 3, 1);
  for (const auto& stage : stages) {
    for (const BlockSpec& b : stage) {
      const int64_t expanded = adjust_channels(b.in, static_cast<double>(b.expand_ratio));
      const int64_t squeeze = std::max<int64_t>(1, b.in / 4);
      if (expanded != b.in) total += conv_bn(b.in, expanded, 1, 1);
      total += conv_bn(expanded, expanded, b.kernel, expanded);
      total += expanded * squeeze + squeeze + squeeze * expanded + expanded;  // fc1, fc2
      total += conv_bn(expanded, b.out, 1, 1);
    }
  }
  const int64_t last_in = stages.back().back().out;
  total += conv_bn(last_in, 4 * last_in, 1, 1);
  return total + (4 * last_in + 1) * options.num_classes;
}

}  // namespace ddpx::models
