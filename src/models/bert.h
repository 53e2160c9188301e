// BERT (Devlin et al. 2019) with its masked-language-model head, as one libtorch module with
// the structure, parameter names and initialisation of Hugging Face's BertForMaskedLM, so that
// its weights load directly: word, position and token-type embeddings summed and LayerNorm-ed,
// post-norm encoder layers (bidirectional self-attention with separate query, key and value
// projections, then x = LayerNorm(x + attention); a GELU (erf) MLP, then x = LayerNorm(x +
// MLP)), and the head: dense + GELU + LayerNorm, then a decoder whose weight IS the word
// embedding's, plus a bias of its own. LayerNorm eps 1e-12, as BERT's.
//
// Parameter names are BertForMaskedLM's: bert.embeddings.{word_embeddings, position_embeddings,
// token_type_embeddings, LayerNorm}, bert.encoder.layer.{i}.{attention.self.{query, key, value},
// attention.output.{dense, LayerNorm}, intermediate.dense, output.{dense, LayerNorm}},
// cls.predictions.{bias, transform.dense, transform.LayerNorm}. The decoder has no parameter of
// its own (Hugging Face's cls.predictions.decoder.weight and .bias are the same tensors as the
// word embedding and cls.predictions.bias), so parameters() holds each once.
//
// Training data has no padding and one segment: every token attends to every token of its
// window and its token type is 0.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

namespace ddpx::models {

struct BertOptions {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double dropout = 0.0;  // hidden and attention dropout (BERT pretrained with 0.1)
};

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);  // (B, T) int64 -> (B, T, H)

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // NOLINT: Hugging Face's name
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, H) -> (B, T, H), before the output

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(BertSelfAttention);

// A dense layer, dropout, and the residual's LayerNorm: attention.output and output.
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(int64_t in, const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual);

  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // NOLINT: Hugging Face's name
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertResidualOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // dense + GELU

  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const BertOptions& options);
  torch::nn::ModuleList layer{nullptr};
};
TORCH_MODULE(BertEncoder);

// BertModel without its pooler (BertForMaskedLM has none): the module named `bert`.
class BertBodyImpl : public torch::nn::Module {
 public:
  explicit BertBodyImpl(const BertOptions& options);
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
};
TORCH_MODULE(BertBody);

// cls.predictions.transform: dense + GELU + LayerNorm.
class BertHeadTransformImpl : public torch::nn::Module {
 public:
  explicit BertHeadTransformImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // NOLINT: Hugging Face's name
};
TORCH_MODULE(BertHeadTransform);

class BertPredictionsImpl : public torch::nn::Module {
 public:
  explicit BertPredictionsImpl(const BertOptions& options);
  BertHeadTransform transform{nullptr};
  torch::Tensor bias;  // (vocab): the decoder's bias
};
TORCH_MODULE(BertPredictions);

class BertClsImpl : public torch::nn::Module {
 public:
  explicit BertClsImpl(const BertOptions& options);
  BertPredictions predictions{nullptr};
};
TORCH_MODULE(BertCls);

class BertImpl : public torch::nn::Module {
 public:
  explicit BertImpl(const BertOptions& options);
  // ids: (B, T) integer token ids, T <= max_position_embeddings -> MLM logits (B, T, vocab).
  torch::Tensor forward(torch::Tensor ids);
  const BertOptions& options() const { return options_; }
  // forward() in the pieces a pipeline cuts between (layer_sequence.h): the embeddings of ids
  // (B, T) -> (B, T, H); then each layer of bert->encoder->layer; then head(): the MLM head's
  // transform and the decoder tied to the word embedding, (B, T, H) -> logits (B, T, vocab).
  torch::Tensor embed(torch::Tensor ids);
  torch::Tensor head(const torch::Tensor& x);

  BertBody bert{nullptr};
  BertCls cls{nullptr};

 private:
  BertOptions options_;
};
TORCH_MODULE(Bert);

// The parameter count of a BERT built with `options` (the tied decoder weight counted once),
// without allocating it.
int64_t bert_parameter_count(const BertOptions& options);

}  // namespace ddpx::models
