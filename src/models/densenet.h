// DenseNet-BC 121/161/169/201 with torchvision 0.14's structure, names and initialisation:
// `features` is a Sequential of conv0, norm0, relu0, pool0, denseblockN (denselayerM each:
// norm1, conv1, norm2, conv2), transitionN (norm, conv, pool) and norm5; `classifier` is one
// Linear. Keys match torchvision's state_dict (features.denseblock1.denselayer1.norm1.weight,
// features.transition1.conv.weight, classifier.bias, ...). memory_efficient=False: no
// checkpointing, the results are identical either way.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/batch_norm.h"

namespace ddpx::models {

struct DenseNetOptions {
  int64_t growth_rate = 32;                             // k in the paper
  std::vector<int64_t> block_config = {6, 12, 24, 16};  // dense layers per block
  int64_t num_init_features = 64;
  int64_t bn_size = 4;     // bottleneck width = bn_size * growth_rate
  double drop_rate = 0.0;  // dropout after each dense layer (train mode only)
  int64_t num_classes = 1000;
};

// BN-ReLU-1x1 conv (bottleneck) then BN-ReLU-3x3 conv; returns growth_rate new channels.
class DenseLayerImpl : public torch::nn::Module {
 public:
  DenseLayerImpl(int64_t in, int64_t growth_rate, int64_t bn_size, double drop_rate);
  // x: (B, in, H, W), the concatenation of every earlier feature map -> (B, growth_rate, H, W)
  torch::Tensor forward(torch::Tensor x);

  BatchNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::ReLU relu1{nullptr}, relu2{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};

 private:
  double drop_rate_ = 0.0;
};
TORCH_MODULE(DenseLayer);

// denselayer1..N; each sees all earlier outputs concatenated (torchvision's _DenseBlock).
class DenseBlockImpl : public torch::nn::Module {
 public:
  DenseBlockImpl(int64_t num_layers, int64_t in, int64_t bn_size, int64_t growth_rate,
                 double drop_rate);
  // x: (B, in, H, W) -> (B, in + num_layers * growth_rate, H, W)
  torch::Tensor forward(torch::Tensor x);

 private:
  std::vector<DenseLayer> layers_;
};
TORCH_MODULE(DenseBlock);

// BN-ReLU-1x1 conv-2x2 average pool between blocks (torchvision's _Transition).
class TransitionImpl : public torch::nn::Module {
 public:
  TransitionImpl(int64_t in, int64_t out);
  torch::Tensor forward(torch::Tensor x);  // (B, in, H, W) -> (B, out, H/2, W/2)

  BatchNorm norm{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Conv2d conv{nullptr};
  torch::nn::AvgPool2d pool{nullptr};
};
TORCH_MODULE(Transition);

class DenseNetImpl : public torch::nn::Module {
 public:
  explicit DenseNetImpl(const DenseNetOptions& options);
  // x: (B, 3, H, W) float, H and W >= 29 -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(DenseNet);

// Parameter count without building (densenet161 holds 29M parameters).
int64_t densenet_parameter_count(const DenseNetOptions& options);

}  // namespace ddpx::models
