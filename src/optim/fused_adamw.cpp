// AdamW through ATen's fused kernel (see fused_adamw.h).
#include "optim/fused_adamw.h"

#include <ATen/ops/_fused_adamw.h>

#include <vector>

namespace ddpx::optim {
namespace {

// Whether the kernel, which walks a parameter and its gradient as flat memory, takes the pair
// in a call for `device` and `dtype` (as torch.optim groups tensors by both for it).
bool fusable(const torch::Tensor& p, const torch::Device& device, torch::ScalarType dtype) {
  if (!c10::isFloatingType(p.scalar_type()) || p.device() != device || p.scalar_type() != dtype ||
      !p.is_non_overlapping_and_dense())
    return false;
  const torch::Tensor& g = p.grad();
  return !g.defined() || (!g.is_sparse() && g.scalar_type() == p.scalar_type() &&
                          g.strides() == p.strides() && g.is_non_overlapping_and_dense());
}

}  // namespace

bool fused_adamw_step(torch::optim::AdamW& adamw) {
  for (auto& group : adamw.param_groups()) {
    if (group.params().empty()) continue;
    const auto& first = group.params().front();
    for (const auto& p : group.params())
      if (!fusable(p, first.device(), first.scalar_type())) return false;
  }
  torch::NoGradGuard no_grad;
  auto& states = adamw.state();
  for (auto& group : adamw.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
    std::vector<float> steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;  // as libtorch: no gradient, no update
      auto it = states.find(p.unsafeGetTensorImpl());
      if (it == states.end()) {  // libtorch's first-step state
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = states.emplace(p.unsafeGetTensorImpl(), std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
      state.step(state.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      if (o.amsgrad()) max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      steps.push_back(static_cast<float>(state.step()));
    }
    if (params.empty()) continue;
    // The kernel reads each parameter's step (after the increment, as torch.optim's
    // _fused_adamw adds one first) from a float tensor beside it: one copy a group.
    std::vector<torch::Tensor> state_steps =
        torch::tensor(steps).to(params.front().device()).unbind(0);
    const auto [beta1, beta2] = o.betas();
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, o.lr(),
                      beta1, beta2, o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
  }
  return true;
}

}  // namespace ddpx::optim
