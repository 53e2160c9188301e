// Self-attention with its heads split across a tensor-parallel group (Megatron-LM): the fused
// q, k, v projection is column-parallel (rank r computes the q, k and v of heads
// [r * H/T, (r + 1) * H/T)), attention runs on those heads alone, and the output projection is
// row-parallel (one all-reduce forward, one backward at the input's copy_to_region).
//
// Built from a whole torch::nn::MultiheadAttention (libtorch's, as the ViT blocks use): the
// parameters keep its names, `in_proj_weight`, `in_proj_bias`, `out_proj.weight` and
// `out_proj.bias`, so a model's state_dict keys stay torchvision's. Inputs are batch first,
// (B, S, D); attention takes no mask and computes with scaled_dot_product_attention, which is
// MultiheadAttention's arithmetic to rounding. Attention dropout (MultiheadAttention's, on the
// attention weights, in training) draws from a generator of the tensor region's own, seeded by
// the seed and the tensor rank (Megatron-LM's model-parallel RNG): each rank's heads get masks
// of their own, and the default generator, which the replicated regions' dropouts draw from
// in step on every tensor rank, is not moved.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "parallel/tensor/parallel_linear.h"
#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

// q, k, v: (B, h, S, d), this rank's heads -> (B, h, S, d): softmax(q k^T / sqrt(d)) v over the
// whole sequence, `causal` (each position sees itself and those before it) or not. With
// `dropout` > 0 the attention weights are dropped with masks drawn from `generator` (the tensor
// region's, region_generator.h), in SDPA's arithmetic; else scaled_dot_product_attention.
torch::Tensor attend_heads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           bool causal, double dropout, at::Generator* generator);

class ParallelSelfAttentionImpl : public torch::nn::Module {
 public:
  // Throws ddpx::Error(kUsage) when the heads do not divide by the group's size.
  ParallelSelfAttentionImpl(const torch::nn::MultiheadAttention& whole, dist::Context& group);
  // x: (B, S, D) whole -> (B, S, D) whole, on every rank of the group
  torch::Tensor forward(const torch::Tensor& x);
  // x: (B, S, D) gathered by gather_tokens -> this rank's heads' partial sum of the output
  // projection, without its all-reduce and bias (sequence parallelism, regions.h).
  torch::Tensor forward_partial(const torch::Tensor& x);
  // The same from x (B, count, D), this rank's share of `tokens`: gathered with the q, k, v
  // projection by gather_tokens_linear (regions.h), which keeps only the share for backward.
  torch::Tensor forward_partial_gathered(const torch::Tensor& x, int64_t tokens);

  // The state of the generator attention dropout draws from on `device`, and its restore: what a
  // block recomputed in backward replays (activation checkpointing), as checkpoint() replays
  // the default generator's.
  torch::Tensor region_state(const torch::Device& device);
  void set_region_state(const torch::Tensor& state, const torch::Device& device);
  bool drops() const { return is_training() && dropout_ > 0; }

  static ShardSpec in_proj_spec() { return {0, 3}; }
  int64_t local_heads() const { return heads_; }

  torch::Tensor in_proj_weight, in_proj_bias;  // this rank's rows of q, k and v
  RowParallelLinear out_proj{nullptr};

 private:
  torch::Tensor attend(const torch::Tensor& x);        // this rank's heads: (B, S, D / T)
  torch::Tensor attend_qkv(const torch::Tensor& qkv);  // the same from x's q, k, v projection

  at::Generator& region_generator(const torch::Device& device);

  dist::Context& group_;
  int64_t heads_ = 0, head_dim_ = 0;
  double dropout_ = 0;
  uint64_t region_seed_ = 0;
  at::Generator region_;  // made at the first dropout, on the input's device
};
TORCH_MODULE(ParallelSelfAttention);

}  // namespace ddpx::parallel::tensor
