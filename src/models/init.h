// torchvision's weight initialisation (each model's `_initialize_weights` / the loop at the end
// of its __init__), written once: every model in the zoo calls init_torchvision_weights at the
// end of its constructor with the rules its torchvision source uses. One pass over the modules
// in registration order, as torchvision's `for m in self.modules()`, so the same seed draws the
// same numbers in the same order and gives torchvision's initial weights.
#pragma once

#include <torch/nn/module.h>

namespace ddpx::models {

// kaiming_normal_'s mode for every Conv2d (gain sqrt(2) either way).
enum class ConvFan {
  kOut,  // mode="fan_out": resnet, vgg, mobilenet v2/v3, efficientnet
  kIn,   // the default mode="fan_in": densenet
};

// What happens to every Linear.
enum class LinearInit {
  kKeep,      // PyTorch's default, which libtorch's Linear already applied: resnet
  kZeroBias,  // default weight, zero bias: densenet
  kNormal,    // weight N(0, 0.01), zero bias: vgg, mobilenet v2/v3
  kUniform,   // weight U(-1/sqrt(out_features), +1/sqrt(out_features)), zero bias: efficientnet
};

struct TorchvisionInit {
  ConvFan conv_fan = ConvFan::kOut;
  LinearInit linear = LinearInit::kNormal;
};

// Conv2d: kaiming_normal_(weight, fan mode, relu gain), bias (where there is one) 0.
// BatchNorm2d (models::BatchNorm included): weight 1, bias 0. Linear: as `how.linear` says.
// Other modules keep their own initialisation (ViT's is its own, see vit.cpp).
void init_torchvision_weights(torch::nn::Module& model, TorchvisionInit how);

}  // namespace ddpx::models
