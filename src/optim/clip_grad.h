// `--clip_grad_norm`: gradients scaled so that the whole model's gradient 2-norm is at most
// max_norm, as torch.nn.utils.clip_grad_norm_ in Python, computed and applied on the gradients'
// device. One helper for every plan: a rank that holds the whole model clips its own gradients;
// a rank that holds a part (a shard, a stage, a tensor-parallel piece) says how its squares
// become the whole model's (summed over which ranks, counted how many times), and the same
// arithmetic does the rest. libtorch's C++ clip_grad_norm_ returns the norm as a double, and that
// .item() makes the host wait for the GPU at every step; this one returns the norm as a tensor
// and reads it only where the sum crosses ranks (the collective runs on the CPU).
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace ddpx::optim {

// A gradient a rank holds, and how many ranks of the norm's sum hold the same elements (an
// unsplit layer beside tensor-parallel pieces: each of the T ranks holds it whole).
struct HeldGradient {
  torch::Tensor grad;
  int copies = 1;
};

// How the squares of a rank's gradients become the whole model's squared norm. Unset
// all_reduce_sum: the rank holds the whole model, and its norm is torch's to the bit. Set: each
// gradient's sum of squares (in float64, divided by its copies) is added up, summed over the
// ranks by all_reduce_sum (in place, a 1-element float64 CPU tensor; every rank of the sum must
// call it, with or without gradients), and divided by `replicas`, the times that sum counts
// every element (replicas holding the same averaged gradients).
struct NormSum {
  std::function<void(torch::Tensor&)> all_reduce_sum;
  int replicas = 1;
};

// Scales every gradient of `grads` by min(1, max_norm / (norm + 1e-6)), torch's coefficient,
// where norm is the whole model's gradient 2-norm as `sum` says to compute it; returns that norm
// (0-dim, of the gradients' dtype on their device). No gradients: undefined without a sum; with
// one, the norm as float64 on the CPU.
torch::Tensor clip_by_global_norm(const std::vector<HeldGradient>& grads, const NormSum& sum,
                                  double max_norm);

// clip_by_global_norm() on every defined .grad of `parameters`, which are the whole model: the
// same arithmetic as libtorch's torch::nn::utils::clip_grad_norm_, so the same gradients to the
// bit.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace ddpx::optim
