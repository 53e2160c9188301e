// Megatron-LM's parallel linear layers, for torch::nn modules, over a tensor-parallel group of T
// ranks (a dist::Context: the job's, or one split from it, distributed/sub_group.h):
//
// - ColumnParallelLinear: y_r = x W_r^T + b_r, where W_r and b_r are rank r's rows of the whole
//   layer's output features. Takes the whole (replicated) input, gives this rank's out/T output
//   features. Its input passes copy_to_region (regions.h): the all-reduce of its gradient.
// - RowParallelLinear: y = sum_r x_r W_r^T + b, where W_r is rank r's columns of the input
//   features. Takes this rank's in/T input features (a column-parallel layer's output), gives the
//   whole output on every rank: one all-reduce (reduce_from_region), then the bias, held whole.
//
// A column-parallel layer followed by a row-parallel one (an MLP) communicates once forward and
// once backward. Both are built from a whole nn::Linear (every rank's must hold the same
// weights), keeping only this rank's piece, or fresh from sizes with nn::Linear's initialisation
// of the whole layer under the current seed. Parameters are named `weight` and `bias`, so a
// model's state_dict keys stay those of its nn::Linear.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // `parts`: the whole layer's output is that many fused blocks (3 for q, k, v), each split.
  ColumnParallelLinearImpl(const torch::nn::Linear& whole, dist::Context& group, int64_t parts = 1);
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, dist::Context& group,
                           bool bias = true);
  // x: (..., in) whole -> (..., out / T)
  torch::Tensor forward(const torch::Tensor& x);
  // The same without copy_to_region: for an input gathered by gather_tokens (regions.h).
  torch::Tensor forward_local(const torch::Tensor& x);
  // Sequence parallel: x (B, count, D), this rank's share of `tokens`, gathered and multiplied
  // in one node that keeps only the share for backward (gather_tokens_linear, regions.h).
  torch::Tensor forward_gathered(const torch::Tensor& x, int64_t tokens);
  ShardSpec spec() const { return {0, parts_}; }

  torch::Tensor weight, bias;

 private:
  dist::Context& group_;
  int64_t parts_ = 1;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(const torch::nn::Linear& whole, dist::Context& group);
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, dist::Context& group,
                        bool bias = true);
  // x: (..., in / T), this rank's features -> (..., out) whole, on every rank
  torch::Tensor forward(const torch::Tensor& x);
  // This rank's partial sum, without the all-reduce and the bias: for reduce_scatter_tokens.
  torch::Tensor forward_partial(const torch::Tensor& x);
  static ShardSpec weight_spec() { return {1, 1}; }

  torch::Tensor weight, bias;  // bias: the whole layer's (shared), added after the all-reduce

 private:
  dist::Context& group_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace ddpx::parallel::tensor
