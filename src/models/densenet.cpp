// DenseNet, mirroring torchvision/models/densenet.py (0.14).
#include "models/densenet.h"

#include <fmt/ranges.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

#include <string>

#include "core/error.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

// conv0 (7x7/2) and pool0 (3x3/2) leave ceil(H/4); three 2x2 transitions then need at least 8.
// torchvision's weights metadata states the same minimum, (29, 29).
constexpr int64_t kMinInputSize = 29;

nn::ReLU relu_inplace() { return nn::ReLU(nn::ReLUOptions().inplace(true)); }

nn::Conv2d conv_no_bias(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                        int64_t padding = 0) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

}  // namespace

DenseLayerImpl::DenseLayerImpl(int64_t in, int64_t growth_rate, int64_t bn_size, double drop_rate)
    : drop_rate_(drop_rate) {
  const int64_t width = bn_size * growth_rate;
  norm1 = register_module("norm1", BatchNorm(in));
  relu1 = register_module("relu1", relu_inplace());
  conv1 = register_module("conv1", conv_no_bias(in, width, 1));
  norm2 = register_module("norm2", BatchNorm(width));
  relu2 = register_module("relu2", relu_inplace());
  conv2 = register_module("conv2", conv_no_bias(width, growth_rate, 3, 1, /*padding=*/1));
}

torch::Tensor DenseLayerImpl::forward(torch::Tensor x) {
  torch::Tensor out = conv1(relu1(norm1(x)));  // (B, bn_size * k, H, W)
  out = conv2(relu2(norm2(out)));              // (B, k, H, W)
  if (drop_rate_ > 0) {
    out = nn::functional::dropout(
        out, nn::functional::DropoutFuncOptions().p(drop_rate_).training(is_training()));
  }
  return out;
}

DenseBlockImpl::DenseBlockImpl(int64_t num_layers, int64_t in, int64_t bn_size, int64_t growth_rate,
                               double drop_rate) {
  for (int64_t i = 0; i < num_layers; ++i) {
    layers_.push_back(
        register_module("denselayer" + std::to_string(i + 1),
                        DenseLayer(in + i * growth_rate, growth_rate, bn_size, drop_rate)));
  }
}

torch::Tensor DenseBlockImpl::forward(torch::Tensor x) {
  std::vector<torch::Tensor> features{x};
  for (DenseLayer& layer : layers_) features.push_back(layer(torch::cat(features, 1)));
  return torch::cat(features, 1);
}

TransitionImpl::TransitionImpl(int64_t in, int64_t out) {
  norm = register_module("norm", BatchNorm(in));
  relu = register_module("relu", relu_inplace());
  conv = register_module("conv", conv_no_bias(in, out, 1));
  pool = register_module("pool", nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(2)));
}

torch::Tensor TransitionImpl::forward(torch::Tensor x) { return pool(conv(relu(norm(x)))); }

DenseNetImpl::DenseNetImpl(const DenseNetOptions& options) {
  DDPX_CHECK(options.num_classes >= 1, ErrorKind::kUsage,
             "DenseNet num_classes is {}; expected at least 1", options.num_classes);
  DDPX_CHECK(options.block_config.size() == 4, ErrorKind::kInternal,
             "DenseNet needs 4 block depths, got {}", options.block_config.size());
  nn::Sequential layers;
  int64_t channels = options.num_init_features;
  layers->push_back("conv0", conv_no_bias(3, channels, 7, /*stride=*/2, /*padding=*/3));
  layers->push_back("norm0", BatchNorm(channels));
  layers->push_back("relu0", relu_inplace());
  layers->push_back("pool0", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  for (size_t i = 0; i < options.block_config.size(); ++i) {
    const int64_t num_layers = options.block_config[i];
    const std::string index = std::to_string(i + 1);
    layers->push_back("denseblock" + index, DenseBlock(num_layers, channels, options.bn_size,
                                                       options.growth_rate, options.drop_rate));
    channels += num_layers * options.growth_rate;
    if (i + 1 != options.block_config.size()) {
      layers->push_back("transition" + index, Transition(channels, channels / 2));
      channels /= 2;
    }
  }
  layers->push_back("norm5", BatchNorm(channels));
  features = register_module("features", layers);
  classifier = register_module("classifier", nn::Linear(channels, options.num_classes));

  init_torchvision_weights(*this, {ConvFan::kIn, LinearInit::kZeroBias});
}

torch::Tensor DenseNetImpl::forward(torch::Tensor x) {
  DDPX_CHECK(
      x.dim() == 4 && x.size(1) == 3 && x.size(2) >= kMinInputSize && x.size(3) >= kMinInputSize,
      ErrorKind::kUsage,
      "DenseNet expects input of shape (B, 3, H, W) with H, W >= {} (a stride-4 stem and "
      "three 2x2 pools), got {}; resize with --image_size 32 or larger",
      kMinInputSize, fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = torch::relu(features->forward(x));  // (B, C, H/32, W/32)
  x = x.mean({2, 3});                     // (B, C)
  return classifier(x);                   // (B, num_classes)
}

int64_t densenet_parameter_count(const DenseNetOptions& o) {
  const int64_t width = o.bn_size * o.growth_rate;
  int64_t channels = o.num_init_features;
  int64_t total = 3 * channels * 7 * 7 + 2 * channels;  // conv0, norm0
  for (size_t i = 0; i < o.block_config.size(); ++i) {
    for (int64_t j = 0; j < o.block_config[i]; ++j) {
      // norm1, conv1 (1x1), norm2, conv2 (3x3)
      total += 2 * channels + channels * width + 2 * width + width * o.growth_rate * 9;
      channels += o.growth_rate;
    }
    if (i + 1 != o.block_config.size()) {
      total += 2 * channels + channels * (channels / 2);  // norm, conv
      channels /= 2;
    }
  }
  return total + 2 * channels + (channels + 1) * o.num_classes;  // norm5, classifier
}

}  // namespace ddpx::models
