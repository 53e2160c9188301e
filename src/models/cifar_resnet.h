// The CIFAR ResNets of He et al. 2016 (section 4.2): a 3x3 convolution to 16 channels, then
// three stages of n BasicBlocks at 16, 32 and 64 channels (the last two halving the size), global
// average pooling and a linear layer; depth 6n + 2: resnet20 (n = 3, 0.27M parameters), resnet32,
// resnet44, resnet56. The shortcuts that change shape are 1x1 convolutions with BatchNorm (the
// paper's option B). Made for 28-32 px images: the full resolution reaches the first stage, at a
// fraction of ResNet-18's compute with the CIFAR stem.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "models/batch_norm.h"

namespace ddpx::models {

struct CifarResNetOptions {
  int64_t blocks_per_stage = 3;  // n: depth 6n + 2
  int64_t num_classes = 10;
};

class CifarResNetImpl : public torch::nn::Module {
 public:
  explicit CifarResNetImpl(const CifarResNetOptions& options);
  // x: (B, 3, H, W) -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  BatchNorm bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  torch::nn::Sequential make_stage(int64_t planes, int64_t stride);

  CifarResNetOptions options_;
  int64_t inplanes_ = 16;
};
TORCH_MODULE(CifarResNet);

}  // namespace ddpx::models
