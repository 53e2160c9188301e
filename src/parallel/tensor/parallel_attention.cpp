// Self-attention split by heads (see parallel_attention.h).
#include "parallel/tensor/parallel_attention.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/functional/linear.h>

#include <cmath>
#include <mutex>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/tensor/regions.h"

namespace ddpx::parallel::tensor {

torch::Tensor attend_heads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           bool causal, double dropout, at::Generator* generator) {
  if (dropout <= 0 || generator == nullptr) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, 0.0, causal);
  }
  torch::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) {
    const int64_t s = q.size(-2);
    torch::Tensor future = torch::ones({s, s}, torch::dtype(torch::kBool).device(q.device()));
    scores = scores.masked_fill(future.triu(1), -INFINITY);
  }
  torch::Tensor weights = torch::softmax(scores, -1);
  torch::Tensor keep;
  {
    torch::NoGradGuard no_grad;
    keep = at::empty_like(weights).bernoulli_(1 - dropout, *generator);
  }
  return at::matmul(weights * keep / (1 - dropout), v);
}

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
  dropout_ = o.dropout();
  // Megatron-LM's offset: the default seed, moved by a constant and the tensor rank.
  region_seed_ = at::detail::getDefaultCPUGenerator().current_seed() + 2718 +
                 static_cast<uint64_t>(group.rank());
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

torch::Tensor ParallelSelfAttentionImpl::forward_partial_gathered(const torch::Tensor& x,
                                                                  int64_t tokens) {
  return out_proj->forward_partial(
      attend_qkv(gather_tokens_linear(x, tokens, in_proj_weight, in_proj_bias, group_)));
}

torch::Tensor ParallelSelfAttentionImpl::attend(const torch::Tensor& x) {
  return attend_qkv(torch::nn::functional::linear(x, in_proj_weight, in_proj_bias));
}

torch::Tensor ParallelSelfAttentionImpl::attend_qkv(const torch::Tensor& qkv) {
  const int64_t batch = qkv.size(0), tokens = qkv.size(1);
  // (B, S, 3 * h * d) -> three of (B, h, S, d)
  auto split = qkv.view({batch, tokens, 3, heads_, head_dim_}).permute({2, 0, 3, 1, 4});
  torch::Tensor attended;
  if (is_training() && dropout_ > 0) {
    // MultiheadAttention's: softmax(q k^T / sqrt(d)), dropped out, times v.
    torch::Tensor weights = torch::softmax(at::matmul(split[0], split[1].transpose(-2, -1)) /
                                               std::sqrt(static_cast<double>(head_dim_)),
                                           -1);
    torch::Tensor keep;
    {
      torch::NoGradGuard no_grad;
      // bernoulli_ takes the generator's lock itself.
      keep = at::empty_like(weights).bernoulli_(1 - dropout_, region_generator(weights.device()));
    }
    attended = at::matmul(weights * keep / (1 - dropout_), split[2]);
  } else {
    attended = at::scaled_dot_product_attention(split[0], split[1], split[2]);
  }
  return attended.transpose(1, 2).reshape({batch, tokens, heads_ * head_dim_});
}

at::Generator& ParallelSelfAttentionImpl::region_generator(const torch::Device& device) {
  if (!region_.defined() || region_.device() != device) {
    if (device.is_cuda()) {
      region_ = at::globalContext().defaultGenerator(device).clone();
      region_.set_current_seed(region_seed_);
    } else {
      region_ = at::detail::createCPUGenerator(region_seed_);
    }
  }
  return region_;
}

torch::Tensor ParallelSelfAttentionImpl::region_state(const torch::Device& device) {
  at::Generator& g = region_generator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void ParallelSelfAttentionImpl::set_region_state(const torch::Tensor& state,
                                                 const torch::Device& device) {
  at::Generator& g = region_generator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace ddpx::parallel::tensor
