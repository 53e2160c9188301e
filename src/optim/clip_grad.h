// `--clip_grad_norm`: gradients scaled so that their total 2-norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ in Python, computed and applied on the gradients' device.
// libtorch's C++ clip_grad_norm_ returns the norm as a double, and that .item() makes the host
// wait for the GPU at every step; this one returns the norm as a tensor and never reads it.
#pragma once

#include <torch/types.h>

#include <vector>

namespace ddpx::optim {

// Scales every defined .grad of `parameters` by min(1, max_norm / (norm + 1e-6)), where norm is
// the 2-norm of all of them together; returns that norm (0-dim, on the gradients' device;
// undefined when no parameter has a gradient). The same arithmetic as libtorch's
// torch::nn::utils::clip_grad_norm_, so the same gradients to the bit.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

// The one clip-by-global-norm step every plan ends its clip_grad_norm() with, once it has the
// norm of the whole model's gradient (summed over the ranks that hold its parts):
// clip_coefficient() is min(1, max_norm / (norm + 1e-6)), torch's; clip_by_norm() scales every
// gradient of `grads` by it in one multi-tensor op (`norm`: 0-dim, of their dtype).
torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm);
void clip_by_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm,
                  double max_norm);

}  // namespace ddpx::optim
