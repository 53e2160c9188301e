// Self-attention split by heads (see parallel_attention.h).
#include "parallel/tensor/parallel_attention.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/functional/linear.h>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/tensor/regions.h"

namespace ddpx::parallel::tensor {

ParallelSelfAttentionImpl::ParallelSelfAttentionImpl(const torch::nn::MultiheadAttention& whole,
                                                     dist::Context& group)
    : group_(group) {
  const auto& o = whole->options;
  const int ranks = group.world_size();
  DDPX_CHECK(o.num_heads() % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: the attention's {} heads do not split over {} ranks; pick a "
             "size that divides {}",
             ranks, o.num_heads(), ranks, o.num_heads());
  DDPX_CHECK(whole->_qkv_same_embed_dim && whole->in_proj_bias.defined() &&
                 !whole->bias_k.defined() && !o.add_zero_attn(),
             ErrorKind::kUsage,
             "tensor parallel: only self-attention with one fused, biased q/k/v projection and no "
             "added key/value biases splits by heads");
  DDPX_CHECK(o.dropout() == 0.0, ErrorKind::kUsage,
             "tensor parallel: attention dropout {} is not supported; use 0", o.dropout());
  heads_ = o.num_heads() / ranks;
  head_dim_ = o.embed_dim() / o.num_heads();
  torch::NoGradGuard no_grad;
  in_proj_weight = register_parameter(
      "in_proj_weight", take_shard(whole->in_proj_weight, in_proj_spec(), group.rank(), ranks));
  in_proj_bias = register_parameter(
      "in_proj_bias", take_shard(whole->in_proj_bias, in_proj_spec(), group.rank(), ranks));
  out_proj = register_module("out_proj", RowParallelLinear(whole->out_proj, group));
}

torch::Tensor ParallelSelfAttentionImpl::forward(const torch::Tensor& x) {
  return out_proj(attend(copy_to_region(x, group_)));
}

torch::Tensor ParallelSelfAttentionImpl::forward_partial(const torch::Tensor& x) {
  return out_proj->forward_partial(attend(x));
}

torch::Tensor ParallelSelfAttentionImpl::attend(const torch::Tensor& x) {
  const int64_t batch = x.size(0), tokens = x.size(1);
  torch::Tensor qkv = torch::nn::functional::linear(x, in_proj_weight, in_proj_bias);
  // (B, S, 3 * h * d) -> three of (B, h, S, d)
  auto split = qkv.view({batch, tokens, 3, heads_, head_dim_}).permute({2, 0, 3, 1, 4});
  torch::Tensor attended = at::scaled_dot_product_attention(split[0], split[1], split[2]);
  return attended.transpose(1, 2).reshape({batch, tokens, heads_ * head_dim_});
}

}  // namespace ddpx::parallel::tensor
