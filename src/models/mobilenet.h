// MobileNetV2 with torchvision 0.14's structure, names and initialisation: `features` is a
// Sequential of Conv-BN-ReLU6 triples ("0", "1", "2") and InvertedResidual blocks (each a `conv`
// Sequential), `classifier` is Dropout + Linear, so keys match torchvision's state_dict
// (features.1.conv.0.0.weight, classifier.1.bias, ...). Width multiplier 1.0.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/batch_norm.h"

namespace ddpx::models {

// torchvision's Conv2dNormActivation (conv, BatchNorm, ReLU6). A Sequential there, so children
// are named "0", "1", "2"; a module here because libtorch cannot nest a Sequential in one.
class ConvBnReLU6Impl : public torch::nn::Module {
 public:
  ConvBnReLU6Impl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv{nullptr};
  BatchNorm bn{nullptr};
  torch::nn::ReLU6 relu6{nullptr};
};
TORCH_MODULE(ConvBnReLU6);

// Expand (1x1) -> depthwise 3x3 -> project (1x1, linear); residual when shapes allow.
class InvertedResidualImpl : public torch::nn::Module {
 public:
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential conv{nullptr};

 private:
  bool use_residual_ = false;
};
TORCH_MODULE(InvertedResidual);

class MobileNetV2Impl : public torch::nn::Module {
 public:
  explicit MobileNetV2Impl(int64_t num_classes, double dropout = 0.2);
  // x: (B, 3, H, W) float -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr}, classifier{nullptr};
};
TORCH_MODULE(MobileNetV2);

}  // namespace ddpx::models
