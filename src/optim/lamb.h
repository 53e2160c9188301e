// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
// minutes") as a torch::optim::Optimizer, for large-batch training (`--optimizer lamb`): Adam's
// direction with L2 weight decay, rescaled per tensor by a trust ratio ||p|| / ||update|| so that
// every layer moves by about lr times its own norm.
//
// The update is timm's `Lamb` / apex FusedLAMB with grad averaging (m takes (1 - beta1) g) and
// without their global gradient-norm clipping (timm max_grad_norm=None): clip before the step if
// wanted. For a parameter p with gradient g (parameters without a gradient are skipped), t its
// own step count starting at 1:
//
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)   (both divisors 1 if !bias_correction)
//   update = m_hat / (sqrt(v_hat) + eps)
//   update += weight_decay * p                   only when p.dim() > 1
//   trust = ||p|| / ||update||  when ||p|| > 0 and ||update|| > 0, else 1   (every parameter)
//   p -= lr * trust * update
//
// ||.|| is the L2 norm over the whole tensor. Weight decay skips 0-D and 1-D parameters (biases,
// BatchNorm/LayerNorm), as BERT's LAMB and common practice exclude them; the trust ratio still
// applies to them, as in the paper and NVIDIA's NVLAMB (a zero-initialized bias gets trust 1).
//
// The trust ratio stays a device tensor (torch::where, as timm), so a CUDA step does not
// synchronize with the host. p.grad() is read, never changed.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/types.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace ddpx::optim {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3);  // NOLINT(google-explicit-constructor): as AdamWOptions
  TORCH_ARG(double, lr) = 1e-3;
  typedef std::tuple<double, double> betas_t;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0.01;
  TORCH_ARG(bool, bias_correction) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LambOptions& lhs, const LambOptions& rhs);
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);     // m
  TORCH_ARG(torch::Tensor, exp_avg_sq);  // v

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LambParamState& lhs, const LambParamState& rhs);
};

class Lamb : public torch::optim::Optimizer {
 public:
  // Throws ddpx::Error(kUsage) for a negative lr, eps or weight decay, or a beta outside [0, 1).
  explicit Lamb(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                LambOptions defaults = {});
  explicit Lamb(std::vector<torch::Tensor> params, LambOptions defaults = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    torch::optim::serialize<LambParamState, LambOptions>(archive, self);
  }
};

}  // namespace ddpx::optim
