// LAMB (see lamb.h).
#include "optim/lamb.h"

#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <cmath>

#include "core/error.h"

namespace ddpx::optim {

LambOptions::LambOptions(double lr) : lr_(lr) {}

bool operator==(const LambOptions& lhs, const LambOptions& rhs) {
  return lhs.lr() == rhs.lr() && lhs.betas() == rhs.betas() && lhs.eps() == rhs.eps() &&
         lhs.weight_decay() == rhs.weight_decay() && lhs.bias_correction() == rhs.bias_correction();
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(bias_correction);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, bias_correction);
}

double LambOptions::get_lr() const { return lr(); }

void LambOptions::set_lr(const double lr) { this->lr(lr); }

bool operator==(const LambParamState& lhs, const LambParamState& rhs) {
  return lhs.step() == rhs.step() && torch::equal_if_defined(lhs.exp_avg(), rhs.exp_avg()) &&
         torch::equal_if_defined(lhs.exp_avg_sq(), rhs.exp_avg_sq());
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

Lamb::Lamb(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, LambOptions defaults)
    : Optimizer(param_groups, std::make_unique<LambOptions>(defaults)) {
  const auto usage = ErrorKind::kUsage;
  const auto [beta1, beta2] = defaults.betas();
  DDPX_CHECK(defaults.lr() >= 0, usage, "LAMB: learning rate {} is negative", defaults.lr());
  DDPX_CHECK(defaults.eps() >= 0, usage, "LAMB: eps {} is negative", defaults.eps());
  DDPX_CHECK(defaults.weight_decay() >= 0, usage, "LAMB: weight decay {} is negative",
             defaults.weight_decay());
  DDPX_CHECK(0 <= beta1 && beta1 < 1, usage, "LAMB: beta1 {} is not in [0, 1)", beta1);
  DDPX_CHECK(0 <= beta2 && beta2 < 1, usage, "LAMB: beta2 {} is not in [0, 1)", beta2);
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LambOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      DDPX_CHECK(!grad.is_sparse(), ErrorKind::kUsage,
                 "LAMB does not support sparse gradients; use dense embeddings or Adam");
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) {
        auto fresh = std::make_unique<LambParamState>();
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(p.unsafeGetTensorImpl(), std::move(fresh)).first;
      }
      auto& state = static_cast<LambParamState&>(*it->second);
      state.step(state.step() + 1);
      const double t = static_cast<double>(state.step());
      const double bias_correction1 = o.bias_correction() ? 1 - std::pow(beta1, t) : 1.0;
      const double bias_correction2 = o.bias_correction() ? 1 - std::pow(beta2, t) : 1.0;

      auto& m = state.exp_avg();
      auto& v = state.exp_avg_sq();
      m.mul_(beta1).add_(grad, 1 - beta1);
      v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      auto denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
      auto update = (m / bias_correction1).div_(denom);
      if (p.dim() > 1 && o.weight_decay() != 0) update.add_(p, o.weight_decay());

      const auto w_norm = p.norm();
      const auto u_norm = update.norm();
      const auto trust = torch::where(w_norm.gt(0).logical_and(u_norm.gt(0)), w_norm / u_norm, 1.0);
      p.add_(update.mul_(trust), -o.lr());
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }

void Lamb::load(torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace ddpx::optim
