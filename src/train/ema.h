// An exponential moving average of a model's weights (Polyak averaging, as timm's ModelEmaV3):
// after every optimizer step, ema = d * ema + (1 - d) * weights for every floating-point
// parameter and buffer (BatchNorm statistics too), other buffers copied. The decay warms up as
// d_t = min(decay, (1 + t) / (10 + t)), so a short run's average is not dominated by the random
// initial weights. Every rank holds the same weights after a synchronized step, so every rank
// keeps the same average without communication.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::train {

class ModelEma {
 public:
  // `shadow` is a second instance of the model's architecture (same parameter and buffer order);
  // it is set to `model`'s current weights and moved to their device.
  ModelEma(torch::nn::AnyModule shadow, torch::nn::Module& model, double decay);

  void update(torch::nn::Module& model);   // after an optimizer step
  double decay_at(int64_t updates) const;  // the warmed-up decay of update number `updates`

  torch::nn::Module& module() { return *shadow_.ptr(); }
  torch::Tensor forward(const torch::Tensor& images) { return shadow_.forward(images); }
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }  // after a checkpoint load

 private:
  torch::nn::AnyModule shadow_;  // always in eval mode
  double decay_;
  int64_t updates_ = 0;
  std::vector<torch::Tensor> averaged_, copied_;  // shadow tensors, by kind
};

}  // namespace ddpx::train
