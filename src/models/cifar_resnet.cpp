#include "models/cifar_resnet.h"

#include <string>

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
  init_resnet_weights(*this);
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

void register_cifar_resnet_models(std::vector<ModelInfo>& table) {
  for (int64_t depth : {20, 32, 44, 56}) {
    ModelInfo info;
    info.name = "resnet" + std::to_string(depth);
    info.family = "cifar_resnet";
    info.default_image_size = 32;
    // He et al.: SGD 0.1, momentum 0.9, weight decay 1e-4, batch 128.
    info.recommendation.optimizer = "sgd";
    info.recommendation.learning_rate = 0.1;
    info.recommendation.batch_size = 128;
    info.recommendation.weight_decay = 1e-4;
    info.recommendation.normalize = "dataset";
    info.recommendation.note = "He et al. 2016 CIFAR ResNet, 28-32 px";
    info.build = [depth](const ModelConfig& config) {
      CifarResNetOptions options;
      options.blocks_per_stage = (depth - 2) / 6;
      options.num_classes = config.num_classes;
      return torch::nn::AnyModule(CifarResNet(options));
    };
    table.push_back(std::move(info));
  }
}

}  // namespace ddpx::models
