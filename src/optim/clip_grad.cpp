// Gradient clipping on the device (see clip_grad.h).
#include "optim/clip_grad.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>

namespace ddpx::optim {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return {};
  torch::NoGradGuard no_grad;
  // One multi-tensor kernel for the per-gradient norms on a GPU (a loop of norms on a CPU),
  // then the norm of those: libtorch's order of operations.
  std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  clip_by_norm(grads, total, max_norm);
  return total;
}

torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm) {
  return torch::clamp(max_norm / (norm + 1e-6), std::nullopt, 1.0);
}

void clip_by_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm,
                  double max_norm) {
  if (grads.empty()) return;
  torch::NoGradGuard no_grad;
  at::_foreach_mul_(grads, clip_coefficient(norm, max_norm));
}

}  // namespace ddpx::optim
