#include "models/init.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cmath>

namespace ddpx::models {

namespace nn = torch::nn;

void init_torchvision_weights(nn::Module& model, TorchvisionInit how) {
  torch::NoGradGuard no_grad;
  const nn::init::FanModeType fan =
      how.conv_fan == ConvFan::kOut ? nn::init::FanModeType(torch::kFanOut) : torch::kFanIn;
  for (auto& module : model.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      // torchvision passes nonlinearity="relu" (resnet, vgg) or leaves the default leaky_relu
      // with a=0 (the others); both give gain sqrt(2), the same bits.
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, fan, torch::kReLU);
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    } else if (auto* linear = module->as<nn::Linear>()) {
      switch (how.linear) {
        case LinearInit::kKeep:
          continue;
        case LinearInit::kZeroBias:
          break;
        case LinearInit::kNormal:
          nn::init::normal_(linear->weight, 0, 0.01);
          break;
        case LinearInit::kUniform: {
          const double range = 1.0 / std::sqrt(static_cast<double>(linear->weight.size(0)));
          nn::init::uniform_(linear->weight, -range, range);
          break;
        }
      }
      nn::init::zeros_(linear->bias);
    }
  }
}

}  // namespace ddpx::models
