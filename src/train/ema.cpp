#include "train/ema.h"

#include <algorithm>

#include "core/error.h"

namespace ddpx::train {
namespace {

// Parameters then buffers, in registration order: the same order in two instances of one
// architecture.
std::vector<torch::Tensor> tensors_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> all = m.parameters();
  for (auto& b : m.buffers()) all.push_back(b);
  return all;
}

}  // namespace

ModelEma::ModelEma(torch::nn::AnyModule shadow, torch::nn::Module& model, double decay)
    : shadow_(std::move(shadow)), decay_(decay) {
  torch::NoGradGuard no_grad;
  auto source = tensors_of(model);
  auto target = tensors_of(module());
  DDPX_CHECK(source.size() == target.size(), ErrorKind::kInternal,
             "EMA: the shadow model has {} tensors, the model {}", target.size(), source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    DDPX_CHECK(source[i].sizes() == target[i].sizes(), ErrorKind::kInternal,
               "EMA: tensor {} has another shape in the shadow model", i);
    // Same device and memory format as the model's tensor (channels_last too).
    target[i].set_data(source[i].detach().clone());
    target[i].requires_grad_(false);
    (target[i].is_floating_point() ? averaged_ : copied_).push_back(target[i]);
  }
  module().eval();
}

double ModelEma::decay_at(int64_t updates) const {
  return std::min(decay_,
                  (1.0 + static_cast<double>(updates)) / (10.0 + static_cast<double>(updates)));
}

void ModelEma::update(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const double d = decay_at(updates_++);
  std::vector<torch::Tensor> averaged_src, copied_src;
  for (auto& t : tensors_of(model))
    (t.is_floating_point() ? averaged_src : copied_src).push_back(t);
  // One multi-tensor kernel for all the averages: ema += (1 - d) * (w - ema).
  torch::_foreach_lerp_(averaged_, averaged_src, 1.0 - d);
  for (size_t i = 0; i < copied_.size(); ++i) copied_[i].copy_(copied_src[i]);
}

}  // namespace ddpx::train
