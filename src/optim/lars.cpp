// LARS (see lars.h).
#include "optim/lars.h"

#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include "core/error.h"

namespace ddpx::optim {

LarsOptions::LarsOptions(double lr) : lr_(lr) {}

bool operator==(const LarsOptions& lhs, const LarsOptions& rhs) {
  return lhs.lr() == rhs.lr() && lhs.momentum() == rhs.momentum() &&
         lhs.weight_decay() == rhs.weight_decay() &&
         lhs.trust_coefficient() == rhs.trust_coefficient() && lhs.eps() == rhs.eps();
}

void LarsOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
}

void LarsOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
}

double LarsOptions::get_lr() const { return lr(); }

void LarsOptions::set_lr(const double lr) { this->lr(lr); }

bool operator==(const LarsParamState& lhs, const LarsParamState& rhs) {
  return torch::equal_if_defined(lhs.momentum_buffer(), rhs.momentum_buffer());
}

void LarsParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer);
}

void LarsParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, momentum_buffer);
}

Lars::Lars(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, LarsOptions defaults)
    : Optimizer(param_groups, std::make_unique<LarsOptions>(defaults)) {
  const auto usage = ErrorKind::kUsage;
  DDPX_CHECK(defaults.lr() >= 0, usage, "LARS: learning rate {} is negative", defaults.lr());
  DDPX_CHECK(defaults.momentum() >= 0, usage, "LARS: momentum {} is negative", defaults.momentum());
  DDPX_CHECK(defaults.weight_decay() >= 0, usage, "LARS: weight decay {} is negative",
             defaults.weight_decay());
  DDPX_CHECK(defaults.trust_coefficient() >= 0, usage, "LARS: trust coefficient {} is negative",
             defaults.trust_coefficient());
  DDPX_CHECK(defaults.eps() >= 0, usage, "LARS: eps {} is negative", defaults.eps());
}

torch::Tensor Lars::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LarsOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      DDPX_CHECK(!p.grad().is_sparse(), ErrorKind::kUsage,
                 "LARS does not support sparse gradients; use dense embeddings or SGD");
      torch::Tensor d_p = p.grad();
      if (p.dim() > 1) {
        const auto w_norm = p.norm();
        const auto g_norm = d_p.norm();
        auto trust =
            o.trust_coefficient() * w_norm / (g_norm + o.weight_decay() * w_norm + o.eps());
        trust = torch::where(w_norm.gt(0).logical_and(g_norm.gt(0)), trust, 1.0);
        d_p = d_p.add(p, o.weight_decay()).mul_(trust);  // a new tensor: p.grad() is kept
      }
      if (o.momentum() != 0) {
        auto it = state_.find(p.unsafeGetTensorImpl());
        if (it == state_.end()) {
          auto fresh = std::make_unique<LarsParamState>();
          fresh->momentum_buffer(d_p.clone(at::MemoryFormat::Preserve));
          it = state_.emplace(p.unsafeGetTensorImpl(), std::move(fresh)).first;
        } else {
          static_cast<LarsParamState&>(*it->second).momentum_buffer().mul_(o.momentum()).add_(d_p);
        }
        d_p = static_cast<LarsParamState&>(*it->second).momentum_buffer();
      }
      p.add_(d_p, -o.lr());
    }
  }
  return loss;
}

void Lars::save(torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }

void Lars::load(torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace ddpx::optim
