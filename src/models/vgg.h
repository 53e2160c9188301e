// VGG 11/13/16/19, with and without BatchNorm, with torchvision 0.14's structure, names and
// initialisation: `features` (a Sequential of conv, [BN,] ReLU and max-pools, numbered as in
// torchvision), `avgpool` (adaptive, 7x7) and `classifier` (Linear-ReLU-Dropout x2, Linear), so
// keys match torchvision's state_dict (features.0.weight, classifier.6.bias, ...).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::models {

struct VggOptions {
  int64_t depth = 16;  // 11, 13, 16 or 19 (torchvision's configurations A, B, D, E)
  bool batch_norm = false;
  int64_t num_classes = 1000;
  double dropout = 0.5;
};

class VggImpl : public torch::nn::Module {
 public:
  explicit VggImpl(const VggOptions& options);
  // x: (B, 3, H, W) float, H and W >= 32 -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr}, classifier{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
};
TORCH_MODULE(Vgg);

// Parameter count without building (VGG holds 130M+ parameters, slow to initialise).
int64_t vgg_parameter_count(const VggOptions& options);

}  // namespace ddpx::models
