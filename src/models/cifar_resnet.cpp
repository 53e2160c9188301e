#include "models/cifar_resnet.h"

#include <string>

#include "models/init.h"
#include "models/resnet.h"

namespace ddpx::models {

namespace nn = torch::nn;

CifarResNetImpl::CifarResNetImpl(const CifarResNetOptions& options) : options_(options) {
  conv1 = register_module("conv1",
                          nn::Conv2d(nn::Conv2dOptions(3, 16, 3).stride(1).padding(1).bias(false)));
  bn1 = register_module("bn1", BatchNorm(16));
  layer1 = register_module("layer1", make_stage(16, 1));
  layer2 = register_module("layer2", make_stage(32, 2));
  layer3 = register_module("layer3", make_stage(64, 2));
  fc = register_module("fc", nn::Linear(64, options.num_classes));
  // torchvision ResNet's rules (the He et al. models have no torchvision source of their own).
  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kKeep});
}

nn::Sequential CifarResNetImpl::make_stage(int64_t planes, int64_t stride) {
  nn::Sequential stage;
  for (int64_t i = 0; i < options_.blocks_per_stage; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    nn::Sequential downsample{nullptr};
    if (s != 1 || inplanes_ != planes) {
      downsample =
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(inplanes_, planes, 1).stride(s).bias(false)),
                         BatchNorm(planes));
    }
    stage->push_back(BasicBlock(inplanes_, planes, s, downsample));
    inplanes_ = planes;
  }
  return stage;
}

torch::Tensor CifarResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));  // (B, 16, H, W)
  x = layer1->forward(x);          // (B, 16, H, W)
  x = layer2->forward(x);          // (B, 32, H/2, W/2)
  x = layer3->forward(x);          // (B, 64, H/4, W/4)
  x = x.mean({2, 3});              // (B, 64)
  return fc(x);                    // (B, num_classes)
}

}  // namespace ddpx::models
