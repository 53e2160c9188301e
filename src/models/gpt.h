// The GPT-2 family of causal language models (gpt2 124M to gpt2-xl, and nanoGPT's small CPU
// sizes) as one libtorch module, with the structure, names and initialisation of Hugging Face's
// GPT2LMHeadModel and nanoGPT: learned token and position embeddings, pre-norm blocks (causal
// self-attention through scaled_dot_product_attention with one fused qkv projection, a 4x GELU
// MLP with the tanh approximation), a final LayerNorm and an output head tied to the token
// embedding.
//
// Parameter names are GPT2LMHeadModel's: transformer.wte, transformer.wpe,
// transformer.h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj},
// transformer.ln_f. The head has no parameter of its own: its weight IS transformer.wte.weight
// (GPT2LMHeadModel's lm_head.weight is the same tensor), so parameters() holds it once and an
// optimizer or a gradient reducer sees it once. The Linear weights are nn.Linear's (out, in);
// Hugging Face's Conv1D stores them transposed.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::models {

struct GptOptions {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the context: positions the model has embeddings for
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms, as GPT-2
};

// The keys and values of every layer for the tokens decoded so far, so that generation runs
// each new token alone through the model. Empty at first; forward() appends to it.
struct GptCache {
  std::vector<torch::Tensor> keys, values;  // per layer: (B, n_head, T_past, head_dim)
  int64_t length() const { return keys.empty() ? 0 : keys.front().size(2); }
};

// LayerNorm over the last dimension (eps 1e-5) whose bias is optional (GptOptions::bias), which
// libtorch's LayerNorm is not; the parameters are `weight` and `bias` as PyTorch's.
class GptLayerNormImpl : public torch::nn::Module {
 public:
  GptLayerNormImpl(int64_t dim, bool bias);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;  // (dim); bias undefined without biases
};
TORCH_MODULE(GptLayerNorm);

class GptAttentionImpl : public torch::nn::Module {
 public:
  explicit GptAttentionImpl(const GptOptions& options);
  // x: (B, T, C) -> (B, T, C). With past_k and past_v (a layer's cache: (B, H, T_past, D),
  // undefined when empty), x's tokens follow the cached ones and attend to them too; their keys
  // and values are appended.
  torch::Tensor forward(torch::Tensor x, torch::Tensor* past_k = nullptr,
                        torch::Tensor* past_v = nullptr);

  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(GptAttention);

class GptMlpImpl : public torch::nn::Module {
 public:
  explicit GptMlpImpl(const GptOptions& options);
  torch::Tensor forward(torch::Tensor x);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(GptMlp);

// Pre-norm block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const GptOptions& options);
  torch::Tensor forward(torch::Tensor x, torch::Tensor* past_k = nullptr,
                        torch::Tensor* past_v = nullptr);

  GptLayerNorm ln_1{nullptr}, ln_2{nullptr};
  GptAttention attn{nullptr};
  GptMlp mlp{nullptr};
};
TORCH_MODULE(GptBlock);

// GPT2Model's part: embeddings, blocks, final LayerNorm (the module named `transformer`).
class GptTransformerImpl : public torch::nn::Module {
 public:
  explicit GptTransformerImpl(const GptOptions& options);

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  GptLayerNorm ln_f{nullptr};
};
TORCH_MODULE(GptTransformer);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptOptions& options);
  // idx: (B, T) int64 token ids, T <= block_size -> logits (B, T, vocab_size).
  torch::Tensor forward(torch::Tensor idx);
  // The same with a key/value cache: idx holds the tokens after the cache's, at positions
  // cache.length() onwards; their keys and values are appended to the cache.
  // (Not an overload of forward(): AnyModule takes the one forward.)
  torch::Tensor forward_cached(torch::Tensor idx, GptCache& cache);
  const GptOptions& options() const { return options_; }
  // forward() in the pieces a pipeline cuts between (layer_sequence.h): the token and position
  // embeddings of idx (B, T) at positions past.. -> (B, T, C); then each block of transformer->h;
  // then head(): the final LayerNorm and the tied output layer, (B, T, C) -> logits (B, T, vocab).
  torch::Tensor embed(torch::Tensor idx, int64_t past = 0);
  torch::Tensor head(const torch::Tensor& x);

  GptTransformer transformer{nullptr};

 private:
  torch::Tensor run(torch::Tensor idx, GptCache* cache);
  GptOptions options_;
};
TORCH_MODULE(Gpt);

// The parameter count of a GPT built with `options` (the tied head counted once), without
// allocating it: 124,439,808 for gpt2.
int64_t gpt_parameter_count(const GptOptions& options);

// Training FLOPs (forward and backward) of one token at sequence length T: 6N + 12·L·H·Q·T (PaLM,
// appendix B), N the parameters without the position embedding, as nanoGPT's MFU estimate.
double gpt_training_flops_per_token(const GptOptions& options, int64_t seq_len);

}  // namespace ddpx::models
