// SGD through ATen's fused multi-tensor kernel (see foreach_sgd.h).
#include "optim/foreach_sgd.h"

#include <ATen/ops/_fused_sgd.h>

#include "optim/sgd_kernel.h"

namespace ddpx::optim {

bool foreach_sgd_step(torch::optim::SGD& sgd) {
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.dampening() != 0) return false;
    if (group.params().empty()) continue;
    const auto device = group.params().front().device();
    for (const auto& p : group.params()) {
      if (!c10::isFloatingType(p.scalar_type()) || p.device() != device) return false;
      if (p.grad().defined() && (p.grad().scalar_type() != p.scalar_type() || p.grad().is_sparse()))
        return false;
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, buffers;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;  // as libtorch: no gradient, no update
      params.push_back(p);
      grads.push_back(p.grad());
      if (o.momentum() == 0) continue;
      auto& state = sgd.state();
      auto it = state.find(sgd_state_key(p));
      if (it == state.end()) {
        // libtorch clones the first d_p; a zero buffer gives the same value (0 * mu + d_p).
        auto fresh = std::make_unique<torch::optim::SGDParamState>();
        fresh->momentum_buffer(torch::zeros_like(p));
        it = state.emplace(sgd_state_key(p), std::move(fresh)).first;
      }
      buffers.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
    }
    if (params.empty()) continue;
    at::_fused_sgd_(params, grads, buffers, o.weight_decay(), o.momentum(), o.lr(),
                    /*dampening=*/0.0, o.nesterov(), /*maximize=*/false, /*is_first_step=*/false);
  }
  return true;
}

}  // namespace ddpx::optim
