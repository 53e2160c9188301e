// A small multi-layer perceptron: ddpx's own smoke-test model (not in torchvision). It has no
// BatchNorm, so N ranks on 1/N of a batch compute exactly what one process computes on the
// whole batch; the distributed equivalence tests and quick CPU demos use it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::models {

struct MlpOptions {
  int64_t in_features = 3 * 32 * 32;
  int64_t hidden = 256;
  int64_t num_classes = 10;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  // x: (B, C, H, W) with C*H*W == in_features -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  int64_t in_features;
};
TORCH_MODULE(Mlp);

}  // namespace ddpx::models
