// ResNet, ResNeXt and Wide ResNet with torchvision 0.14's exact structure: the same child names
// (conv1, bn1, layer1.0.downsample.0, fc, ...), so named_parameters()/named_buffers() keys equal
// torchvision's state_dict keys, and the same initialisation. A "cifar" stem swaps the 7x7/2
// convolution for a 3x3/1 one and skips the max-pool, keeping every key.
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
#include <string>
#include <vector>

#include "models/batch_norm.h"
#include "models/stem.h"

namespace ddpx::models {

enum class BlockKind { kBasic, kBottleneck };

struct ResNetOptions {
  BlockKind block = BlockKind::kBasic;
  std::vector<int64_t> layers = {2, 2, 2, 2};  // blocks per stage
  int64_t num_classes = 1000;
  int64_t groups = 1;            // ResNeXt cardinality
  int64_t width_per_group = 64;  // 128 for Wide ResNet, 4 for resnext50_32x4d
  Stem stem = Stem::kImagenet;
  bool zero_init_residual = false;
};

// Two 3x3 convolutions; expansion 1. torchvision's BasicBlock.
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 torch::nn::Sequential downsample);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  BatchNorm bn1{nullptr}, bn2{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Sequential downsample{nullptr};  // null when the shapes already match
};
TORCH_MODULE(BasicBlock);

// 1x1 -> 3x3 (stride, groups) -> 1x1; expansion 4. torchvision's Bottleneck (ResNet v1.5).
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, torch::nn::Sequential downsample,
                 int64_t groups, int64_t base_width);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  BatchNorm bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  // x: (B, 3, H, W) float -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  BatchNorm bn1{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::MaxPool2d maxpool{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear fc{nullptr};

  const ResNetOptions& options() const { return options_; }

 private:
  torch::nn::Sequential make_layer(int64_t planes, int64_t blocks, int64_t stride);

  ResNetOptions options_;
  int64_t inplanes_ = 64;
};
TORCH_MODULE(ResNet);

// The parameter count a ResNet built with these options has, computed from the structure
// without allocating it (so `ddpx models` lists the zoo in milliseconds).
int64_t resnet_parameter_count(const ResNetOptions& options);

}  // namespace ddpx::models
