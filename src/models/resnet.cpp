// ResNet family, mirroring torchvision/models/resnet.py (0.14) line for line where it matters
// for state_dict compatibility: child names, registration order, and initialisation.
#include "models/resnet.h"

#include <fmt/ranges.h>
#include <torch/nn/init.h>

#include "core/error.h"
#include "models/init.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1, int64_t groups = 1) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).groups(groups).bias(false));
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// torchvision's ReLU is in-place; the result is the same and it saves one activation copy.
nn::ReLU relu_inplace() { return nn::ReLU(nn::ReLUOptions().inplace(true)); }

// torchvision: Bottleneck width = int(planes * (base_width / 64.0)) * groups.
int64_t bottleneck_width(int64_t planes, int64_t groups, int64_t base_width) {
  return static_cast<int64_t>(static_cast<double>(planes) * (base_width / 64.0)) * groups;
}

int64_t expansion(BlockKind kind) {
  return kind == BlockKind::kBasic ? BasicBlockImpl::kExpansion : BottleneckImpl::kExpansion;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                               nn::Sequential downsample_in) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", BatchNorm(planes));
  relu = register_module("relu", relu_inplace());
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", BatchNorm(planes));
  if (downsample_in) downsample = register_module("downsample", downsample_in);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample ? downsample->forward(x) : x;
  torch::Tensor out = relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  out += identity;
  return relu(out);
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                               nn::Sequential downsample_in, int64_t groups, int64_t base_width) {
  const int64_t width = bottleneck_width(planes, groups, base_width);
  conv1 = register_module("conv1", conv1x1(inplanes, width));
  bn1 = register_module("bn1", BatchNorm(width));
  conv2 = register_module("conv2", conv3x3(width, width, stride, groups));
  bn2 = register_module("bn2", BatchNorm(width));
  conv3 = register_module("conv3", conv1x1(width, planes * kExpansion));
  bn3 = register_module("bn3", BatchNorm(planes * kExpansion));
  relu = register_module("relu", relu_inplace());
  if (downsample_in) downsample = register_module("downsample", downsample_in);
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample ? downsample->forward(x) : x;
  torch::Tensor out = relu(bn1(conv1(x)));
  out = relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  out += identity;
  return relu(out);
}

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  DDPX_CHECK(options.layers.size() == 4, ErrorKind::kInternal,
             "ResNet needs 4 stage depths, got {}", options.layers.size());
  DDPX_CHECK(options.num_classes >= 1, ErrorKind::kUsage,
             "ResNet num_classes is {}; expected at least 1", options.num_classes);
  DDPX_CHECK(options.block == BlockKind::kBottleneck ||
                 (options.groups == 1 && options.width_per_group == 64),
             ErrorKind::kInternal, "BasicBlock only supports groups=1 and width_per_group=64");
  if (options.stem == Stem::kCifar) {
    conv1 = register_module("conv1", conv3x3(3, inplanes_));
  } else {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(3, inplanes_, 7).stride(2).padding(3).bias(false)));
  }
  bn1 = register_module("bn1", BatchNorm(inplanes_));
  relu = register_module("relu", relu_inplace());
  // Registered for both stems so the module tree matches torchvision; the cifar stem skips it.
  maxpool = register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1 = register_module("layer1", make_layer(64, options.layers[0], 1));
  layer2 = register_module("layer2", make_layer(128, options.layers[1], 2));
  layer3 = register_module("layer3", make_layer(256, options.layers[2], 2));
  layer4 = register_module("layer4", make_layer(512, options.layers[3], 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
  fc = register_module("fc", nn::Linear(512 * expansion(options.block), options.num_classes));

  init_torchvision_weights(*this, {ConvFan::kOut, LinearInit::kKeep});
  torch::NoGradGuard no_grad;
  if (options.zero_init_residual) {
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* block = module->as<Bottleneck>()) nn::init::zeros_(block->bn3->weight);
      if (auto* block = module->as<BasicBlock>()) nn::init::zeros_(block->bn2->weight);
    }
  }
}

nn::Sequential ResNetImpl::make_layer(int64_t planes, int64_t blocks, int64_t stride) {
  const int64_t out_planes = planes * expansion(options_.block);
  nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != out_planes) {
    downsample = nn::Sequential(conv1x1(inplanes_, out_planes, stride), BatchNorm(out_planes));
  }
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    // Only the first block of a stage changes stride and width.
    const int64_t block_stride = i == 0 ? stride : 1;
    nn::Sequential block_downsample = i == 0 ? downsample : nn::Sequential{nullptr};
    if (options_.block == BlockKind::kBasic) {
      layer->push_back(BasicBlock(inplanes_, planes, block_stride, block_downsample));
    } else {
      layer->push_back(Bottleneck(inplanes_, planes, block_stride, block_downsample,
                                  options_.groups, options_.width_per_group));
    }
    inplanes_ = out_planes;
  }
  return layer;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3, ErrorKind::kUsage,
             "ResNet expects input of shape (B, 3, H, W), got {}; convert grayscale images to 3 "
             "channels first",
             fmt::format("{}", fmt::join(x.sizes(), "x")));
  x = relu(bn1(conv1(x)));  // (B, 64, H/2, W/2), or (B, 64, H, W) with the cifar stem
  if (options_.stem == Stem::kImagenet) x = maxpool(x);
  // Sequential's call operator cannot deduce a return type; forward() defaults to Tensor.
  for (auto* stage : {&layer1, &layer2, &layer3, &layer4}) x = (*stage)->forward(x);
  // x: (B, 512 * expansion, H/32, W/32)
  // The mean over H and W: adaptive pooling's CUDA backward has no deterministic kernel.
  x = x.mean({2, 3});  // (B, 512 * expansion)
  return fc(x);        // (B, num_classes)
}

int64_t resnet_parameter_count(const ResNetOptions& options) {
  // Conv weights have no bias; each BatchNorm holds weight and bias (buffers do not count).
  auto conv = [](int64_t in, int64_t out, int64_t k, int64_t groups) {
    return out * (in / groups) * k * k;
  };
  auto bn = [](int64_t channels) { return 2 * channels; };
  int64_t total = conv(3, 64, options.stem == Stem::kCifar ? 3 : 7, 1) + bn(64);
  int64_t inplanes = 64;
  const int64_t planes_per_stage[4] = {64, 128, 256, 512};
  const int64_t exp = expansion(options.block);
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = planes_per_stage[stage];
    const int64_t stride = stage == 0 ? 1 : 2;
    for (int64_t i = 0; i < options.layers[stage]; ++i) {
      if (options.block == BlockKind::kBasic) {
        total +=
            conv(inplanes, planes, 3, 1) + bn(planes) + conv(planes, planes, 3, 1) + bn(planes);
      } else {
        const int64_t width = bottleneck_width(planes, options.groups, options.width_per_group);
        total += conv(inplanes, width, 1, 1) + bn(width) + conv(width, width, 3, options.groups) +
                 bn(width) + conv(width, planes * exp, 1, 1) + bn(planes * exp);
      }
      if (i == 0 && (stride != 1 || inplanes != planes * exp)) {
        total += conv(inplanes, planes * exp, 1, 1) + bn(planes * exp);
      }
      inplanes = planes * exp;
    }
  }
  return total + inplanes * options.num_classes + options.num_classes;
}

}  // namespace ddpx::models
