// EfficientNet B0-B7 with torchvision 0.14's structure, names and initialisation: `features` is a
// Sequential of the stem (Conv-BN-SiLU, "0"), seven stages of MBConv blocks ("1".."7", each a
// Sequential whose blocks hold a `block` Sequential) and the head convolution ("8");
// `classifier` is Dropout + Linear. Keys therefore match torchvision's state_dict
// (features.1.0.block.1.fc1.weight, classifier.1.bias, ...). Width and depth multipliers,
// dropout, BatchNorm eps/momentum and the linearly increasing stochastic-depth probability are
// torchvision's, per model.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/batch_norm.h"

namespace ddpx::models {

struct EfficientNetOptions {
  double width_mult = 1.0;
  double depth_mult = 1.0;
  double dropout = 0.2;                // before the classifier
  double stochastic_depth_prob = 0.2;  // of the last block; block i gets prob * i / blocks
  double bn_eps = 1e-5;                // b5-b7: 1e-3 (ported TF weights)
  double bn_momentum = 0.1;            // b5-b7: 0.01
  int64_t num_classes = 1000;
};

// torchvision's Conv2dNormActivation with SiLU: children "0" (conv, no bias), "1" (BatchNorm)
// and, unless `activation` is false, "2" (SiLU).
class ConvBnSiLUImpl : public torch::nn::Module {
 public:
  ConvBnSiLUImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                 bool activation, const EfficientNetOptions& options);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv{nullptr};
  BatchNorm bn{nullptr};
  torch::nn::SiLU act{nullptr};  // null without activation
};
TORCH_MODULE(ConvBnSiLU);

// torchvision.ops.SqueezeExcitation with SiLU: x * sigmoid(fc2(silu(fc1(avgpool(x))))).
class MBConvSqueezeExcitationImpl : public torch::nn::Module {
 public:
  MBConvSqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
  torch::nn::SiLU activation{nullptr};
  torch::nn::Sigmoid scale_activation{nullptr};
};
TORCH_MODULE(MBConvSqueezeExcitation);

// Expand (1x1, when expand_ratio > 1) -> depthwise kxk -> squeeze-excitation -> project (1x1,
// linear); a residual with row-wise stochastic depth when stride is 1 and channels match.
class MBConvImpl : public torch::nn::Module {
 public:
  MBConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t expand_ratio,
             double stochastic_depth_prob, const EfficientNetOptions& options);
  torch::Tensor forward(torch::Tensor x);

  double stochastic_depth_prob() const { return stochastic_depth_prob_; }

  torch::nn::Sequential block{nullptr};

 private:
  bool use_residual_ = false;
  double stochastic_depth_prob_ = 0.0;
};
TORCH_MODULE(MBConv);

// One stage of MBConv blocks, children "0", "1", ...: a Sequential with a plain forward, because
// libtorch cannot nest a Sequential (templated forward) inside another.
class MBConvStageImpl : public torch::nn::SequentialImpl {
 public:
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(MBConvStage);

class EfficientNetImpl : public torch::nn::Module {
 public:
  explicit EfficientNetImpl(const EfficientNetOptions& options);
  // x: (B, 3, H, W) float -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Sequential classifier{nullptr};
};
TORCH_MODULE(EfficientNet);

// torchvision's stochastic_depth(x, p, "row", training): zeroes whole samples with probability
// p and scales survivors by 1 / (1 - p); the identity outside training or when p is 0.
torch::Tensor stochastic_depth_rows(const torch::Tensor& x, double p, bool training);

// The options torchvision uses for efficientnet_b<variant> (0..7), and its default input size.
EfficientNetOptions efficientnet_options(int variant);
int64_t efficientnet_image_size(int variant);

// The parameter count of an EfficientNet built with `options`, without allocating it.
int64_t efficientnet_parameter_count(const EfficientNetOptions& options);

}  // namespace ddpx::models
