// LARS (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional Networks") as a
// torch::optim::Optimizer, for large-batch SGD (`--optimizer lars`): each weight tensor's step is
// rescaled by a trust ratio ||p|| / ||g|| so that every layer moves by about the same fraction
// of its norm, whatever the batch size did to its gradient's scale.
//
// The update is timm's `Lars` (NVIDIA apex LARC's adaptation, trust_clip off, no nesterov, no
// dampening), with biases and normalization weights excluded by shape:
//
//   for a parameter p with gradient g (parameters without a gradient are skipped):
//     if p.dim() > 1:                        (weights; 0-D and 1-D tensors skip both lines)
//       trust = eta * ||p|| / (||g|| + weight_decay * ||p|| + eps)  when ||p|| > 0 and ||g|| > 0
//               1                                                   otherwise
//       g = (g + weight_decay * p) * trust
//     buf = g                       on the first step (buf holds the first g, as torch.optim.SGD)
//     buf = momentum * buf + g      afterwards
//     p  -= lr * buf                (p -= lr * g when momentum is 0: no state is kept)
//
// ||.|| is the L2 norm over the whole tensor. The denominator is the paper's and LARC's
// ||g|| + wd ||p|| (a bound on ||g + wd p||), not the norm of the decayed gradient. 1-D parameters
// get plain momentum SGD with no weight decay: the paper's and common practice's exclusion of
// biases and BatchNorm, done here so the trainer needs no parameter groups for it.
//
// The trust ratio stays a device tensor (torch::where, as timm), so a CUDA step does not
// synchronize with the host. p.grad() is read, never changed.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/types.h>

#include <utility>
#include <vector>

namespace ddpx::optim {

struct LarsOptions : public torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr);  // NOLINT(google-explicit-constructor): as torch::optim::SGDOptions
  TORCH_ARG(double, lr);
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 0.001;  // eta
  TORCH_ARG(double, eps) = 1e-8;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LarsOptions& lhs, const LarsOptions& rhs);
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct LarsParamState : public torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LarsParamState& lhs, const LarsParamState& rhs);
};

class Lars : public torch::optim::Optimizer {
 public:
  // Throws ddpx::Error(kUsage) for a negative lr, momentum, weight decay, eta or eps.
  explicit Lars(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                LarsOptions defaults);
  explicit Lars(std::vector<torch::Tensor> params, LarsOptions defaults)
      : Lars({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    torch::optim::serialize<LarsParamState, LarsOptions>(archive, self);
  }
};

}  // namespace ddpx::optim
