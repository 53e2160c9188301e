// Gradient clipping by the global norm, on the device (see clip_grad.h).
#include "optim/clip_grad.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>

namespace ddpx::optim {
namespace {

// The whole model's norm from a rank that holds all of it: one multi-tensor kernel for the
// per-gradient norms on a GPU (a loop of norms on a CPU), then the norm of those: libtorch's
// order of operations.
torch::Tensor local_norm(const std::vector<torch::Tensor>& grads) {
  std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  return norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
}

// The whole model's norm from the parts the ranks hold: float64 squares, added on the
// gradients' device, then one transfer for the collective.
torch::Tensor summed_norm(const std::vector<HeldGradient>& held, const NormSum& sum) {
  const torch::Device device = held.empty() ? torch::kCPU : held[0].grad.device();
  torch::Tensor squares = torch::zeros({1}, torch::dtype(torch::kFloat64).device(device));
  for (const auto& h : held) {
    torch::Tensor s = h.grad.to(torch::kFloat64).pow(2).sum();
    squares += h.copies == 1 ? s : s / h.copies;
  }
  torch::Tensor on_cpu = squares.cpu();
  sum.all_reduce_sum(on_cpu);
  if (sum.replicas != 1) on_cpu /= sum.replicas;
  return on_cpu.sqrt().reshape({});
}

}  // namespace

torch::Tensor clip_by_global_norm(const std::vector<HeldGradient>& held, const NormSum& sum,
                                  double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& h : held) grads.push_back(h.grad);
  torch::Tensor norm;
  if (sum.all_reduce_sum) {
    norm = summed_norm(held, sum);
    if (grads.empty()) return norm;
    norm = norm.to(grads[0].device(), grads[0].scalar_type());
  } else {
    if (grads.empty()) return {};
    norm = local_norm(grads);
  }
  at::_foreach_mul_(grads, torch::clamp(max_norm / (norm + 1e-6), std::nullopt, 1.0));
  return norm;
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<HeldGradient> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back({p.grad()});
  }
  return clip_by_global_norm(grads, {}, max_norm);
}

}  // namespace ddpx::optim
