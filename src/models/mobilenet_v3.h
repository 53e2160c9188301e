// MobileNetV3 small and large (width 1.0) with torchvision 0.14's structure, names and
// initialisation: `features` is a Sequential of Conv-BN-activation triples ("0", "1" hold the
// weights) and inverted-residual blocks, each a `block` Sequential that may hold a
// squeeze-excitation (fc1, fc2 1x1 convolutions); `classifier` is Linear, Hardswish, Dropout,
// Linear. Keys match torchvision's state_dict (features.1.block.0.0.weight,
// features.1.block.1.fc1.bias, classifier.3.weight, ...). BatchNorm eps 1e-3, momentum 0.01.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/batch_norm.h"

namespace ddpx::models {

enum class Activation { kNone, kReLU, kHardswish };

// torchvision's Conv2dNormActivation with MobileNetV3's BatchNorm (eps 1e-3, momentum 0.01).
// The activation has no parameters, so it is applied in forward rather than registered.
class ConvBnActImpl : public torch::nn::Module {
 public:
  ConvBnActImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                Activation activation);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv{nullptr};
  BatchNorm bn{nullptr};

 private:
  Activation activation_;
};
TORCH_MODULE(ConvBnAct);

// x * hardsigmoid(fc2(relu(fc1(avgpool(x))))): per-channel gates from global context.
class SqueezeExcitationImpl : public torch::nn::Module {
 public:
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels);
  torch::Tensor forward(torch::Tensor x);  // (B, C, H, W) -> (B, C, H, W)

  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(SqueezeExcitation);

// One row of torchvision's inverted_residual_setting (width multiplier 1.0).
struct BneckConfig {
  int64_t in, kernel, expanded, out;
  bool use_se, use_hardswish;
  int64_t stride;
};

// [expand 1x1] -> depthwise kxk -> [squeeze-excitation] -> project 1x1 (linear); residual
// when the shapes allow.
class InvertedResidualV3Impl : public torch::nn::Module {
 public:
  explicit InvertedResidualV3Impl(const BneckConfig& config);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential block{nullptr};

 private:
  bool use_residual_ = false;
};
TORCH_MODULE(InvertedResidualV3);

struct MobileNetV3Options {
  bool large = true;  // mobilenet_v3_large, else mobilenet_v3_small
  int64_t num_classes = 1000;
  double dropout = 0.2;
};

class MobileNetV3Impl : public torch::nn::Module {
 public:
  explicit MobileNetV3Impl(const MobileNetV3Options& options);
  // x: (B, 3, H, W) float -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr}, classifier{nullptr};
};
TORCH_MODULE(MobileNetV3);

// Parameter count from the block table, without building.
int64_t mobilenet_v3_parameter_count(const MobileNetV3Options& options);

}  // namespace ddpx::models
