// GPT-2, as Hugging Face's GPT2LMHeadModel computes it and nanoGPT's model.py writes it.
#include "models/gpt.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

#include <cmath>
#include <string>

#include "core/error.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr double kLayerNormEps = 1e-5;
constexpr double kInitStd = 0.02;  // GPT-2's initializer_range

nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return nn::Linear(nn::LinearOptions(in, out).bias(bias));
}

// GPT-2's initialisation: N(0, 0.02) weights, zero biases; the projections that end a residual
// branch (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 * n_layer)), so that the residual
// stream's variance does not grow with depth.
void init_linear(const nn::Linear& l, double std) {
  nn::init::normal_(l->weight, 0.0, std);
  if (l->bias.defined()) nn::init::zeros_(l->bias);
}

double residual_std(const GptOptions& o) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(o.n_layer));
}

}  // namespace

GptLayerNormImpl::GptLayerNormImpl(int64_t dim, bool with_bias) {
  weight = register_parameter("weight", torch::ones({dim}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor GptLayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, kLayerNormEps);
}

GptAttentionImpl::GptAttentionImpl(const GptOptions& o) : n_head_(o.n_head), dropout_(o.dropout) {
  c_attn = register_module("c_attn", linear(o.n_embd, 3 * o.n_embd, o.bias));
  c_proj = register_module("c_proj", linear(o.n_embd, o.n_embd, o.bias));
  resid_dropout = register_module("resid_dropout", nn::Dropout(o.dropout));
  torch::NoGradGuard no_grad;
  init_linear(c_attn, kInitStd);
  init_linear(c_proj, residual_std(o));
}

torch::Tensor GptAttentionImpl::forward(torch::Tensor x, torch::Tensor* past_k,
                                        torch::Tensor* past_v) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / n_head_;
  // (B, T, 3C) -> q, k, v each (B, H, T, D)
  std::vector<torch::Tensor> qkv = c_attn(x).split(c, /*dim=*/2);
  auto heads = [&](const torch::Tensor& y) { return y.view({b, t, n_head_, d}).transpose(1, 2); };
  torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  if (past_k != nullptr) {
    if (past_k->defined()) {
      k = torch::cat({*past_k, k}, 2);
      v = torch::cat({*past_v, v}, 2);
    }
    *past_k = k;
    *past_v = v;
  }
  const double p = is_training() ? dropout_ : 0.0;
  const int64_t t_past = k.size(2) - t;
  torch::Tensor y;
  if (t_past == 0) {
    y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p, /*is_causal=*/true);
  } else {
    // New tokens after cached ones: token i (at position t_past + i) sees keys 0..t_past + i.
    // SDPA's is_causal aligns the mask to the top left, which is right only without a past.
    torch::Tensor mask =
        torch::ones({t, t_past + t}, torch::dtype(torch::kBool).device(x.device())).tril(t_past);
    y = at::scaled_dot_product_attention(q, k, v, mask, p, /*is_causal=*/false);
  }
  y = y.transpose(1, 2).contiguous().view({b, t, c});  // heads side by side again
  return resid_dropout(c_proj(y));
}

GptMlpImpl::GptMlpImpl(const GptOptions& o) {
  c_fc = register_module("c_fc", linear(o.n_embd, 4 * o.n_embd, o.bias));
  c_proj = register_module("c_proj", linear(4 * o.n_embd, o.n_embd, o.bias));
  dropout = register_module("dropout", nn::Dropout(o.dropout));
  torch::NoGradGuard no_grad;
  init_linear(c_fc, kInitStd);
  init_linear(c_proj, residual_std(o));
}

torch::Tensor GptMlpImpl::forward(torch::Tensor x) {
  // GPT-2's "gelu_new": the tanh approximation.
  return dropout(c_proj(torch::gelu(c_fc(x), "tanh")));
}

GptBlockImpl::GptBlockImpl(const GptOptions& o) {
  ln_1 = register_module("ln_1", GptLayerNorm(o.n_embd, o.bias));
  attn = register_module("attn", GptAttention(o));
  ln_2 = register_module("ln_2", GptLayerNorm(o.n_embd, o.bias));
  mlp = register_module("mlp", GptMlp(o));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x, torch::Tensor* past_k, torch::Tensor* past_v) {
  x = x + attn(ln_1(x), past_k, past_v);
  return x + mlp(ln_2(x));
}

GptTransformerImpl::GptTransformerImpl(const GptOptions& o) {
  wte = register_module("wte", nn::Embedding(o.vocab_size, o.n_embd));
  wpe = register_module("wpe", nn::Embedding(o.block_size, o.n_embd));
  drop = register_module("drop", nn::Dropout(o.dropout));
  h = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < o.n_layer; ++i) h->push_back(GptBlock(o));
  ln_f = register_module("ln_f", GptLayerNorm(o.n_embd, o.bias));
  torch::NoGradGuard no_grad;
  nn::init::normal_(wte->weight, 0.0, kInitStd);
  nn::init::normal_(wpe->weight, 0.0, kInitStd);
}

GptImpl::GptImpl(const GptOptions& o) : options_(o) {
  DDPX_CHECK(o.vocab_size >= 1 && o.block_size >= 1 && o.n_layer >= 1, ErrorKind::kUsage,
             "GPT needs a vocabulary, a context and layers; got vocab_size {}, block_size {}, "
             "n_layer {}",
             o.vocab_size, o.block_size, o.n_layer);
  DDPX_CHECK(o.n_head >= 1 && o.n_embd % o.n_head == 0, ErrorKind::kUsage,
             "GPT n_embd {} is not divisible by n_head {}", o.n_embd, o.n_head);
  transformer = register_module("transformer", GptTransformer(o));
}

torch::Tensor GptImpl::forward(torch::Tensor idx) { return run(std::move(idx), nullptr); }

torch::Tensor GptImpl::forward_cached(torch::Tensor idx, GptCache& cache) {
  return run(std::move(idx), &cache);
}

torch::Tensor GptImpl::embed(torch::Tensor idx, int64_t past) {
  DDPX_CHECK(idx.dim() == 2 && !idx.is_floating_point(), ErrorKind::kUsage,
             "GPT expects (batch, tokens) integer token ids, got {} of shape {}",
             c10::toString(idx.scalar_type()), fmt::join(idx.sizes(), "x"));
  const int64_t t = idx.size(1);
  DDPX_CHECK(past + t <= options_.block_size, ErrorKind::kUsage,
             "a sequence of {} tokens is longer than the model's context of {} positions; use "
             "--seq_len {} or less",
             past + t, options_.block_size, options_.block_size);
  idx = idx.to(torch::kLong);
  torch::Tensor pos = torch::arange(past, past + t, idx.options());         // (T)
  return transformer->drop(transformer->wte(idx) + transformer->wpe(pos));  // (B, T, C)
}

torch::Tensor GptImpl::head(const torch::Tensor& x) {
  // The head tied to the token embedding: logits (B, T, vocab).
  return torch::nn::functional::linear(transformer->ln_f(x), transformer->wte->weight);
}

torch::Tensor GptImpl::run(torch::Tensor idx, GptCache* cache) {
  torch::Tensor x = embed(std::move(idx), cache != nullptr ? cache->length() : 0);
  if (cache != nullptr && cache->keys.empty()) {
    cache->keys.resize(options_.n_layer);
    cache->values.resize(options_.n_layer);
  }
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    auto block = transformer->h->ptr<GptBlockImpl>(i);
    x = cache != nullptr ? block->forward(x, &cache->keys[i], &cache->values[i])
                         : block->forward(x);
  }
  return head(x);
}

int64_t gpt_parameter_count(const GptOptions& o) {
  const int64_t c = o.n_embd, b = o.bias ? 1 : 0;
  const int64_t ln = c + b * c;
  const int64_t per_layer = 2 * ln                   // ln_1, ln_2
                            + 3 * c * c + b * 3 * c  // attn.c_attn
                            + c * c + b * c          // attn.c_proj
                            + 4 * c * c + b * 4 * c  // mlp.c_fc
                            + 4 * c * c + b * c;     // mlp.c_proj
  return o.vocab_size * c + o.block_size * c + o.n_layer * per_layer + ln;
}

double gpt_training_flops_per_token(const GptOptions& o, int64_t seq_len) {
  const double n = static_cast<double>(gpt_parameter_count(o) - o.block_size * o.n_embd);
  return 6.0 * n + 12.0 * static_cast<double>(o.n_layer * o.n_embd * seq_len);
}

}  // namespace ddpx::models
