// BERT, as Hugging Face's BertForMaskedLM computes and initialises it.
#include "models/bert.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include "core/error.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr double kBertLayerNormEps = 1e-12;
constexpr double kBertInitStd = 0.02;  // BERT's initializer_range
constexpr int64_t kBertPadToken = 0;   // BertConfig's pad_token_id: its embedding row starts at 0

// BertPreTrainedModel._init_weights: N(0, 0.02) weights, zero biases.
nn::Linear bert_linear(int64_t in, int64_t out) {
  nn::Linear l(in, out);
  torch::NoGradGuard no_grad;
  nn::init::normal_(l->weight, 0.0, kBertInitStd);
  nn::init::zeros_(l->bias);
  return l;
}

nn::Embedding bert_embedding(int64_t count, int64_t dim) {
  nn::Embedding e(count, dim);
  torch::NoGradGuard no_grad;
  nn::init::normal_(e->weight, 0.0, kBertInitStd);
  return e;
}

nn::LayerNorm bert_layer_norm(int64_t dim) {
  return nn::LayerNorm(nn::LayerNormOptions({dim}).eps(kBertLayerNormEps));
}

}  // namespace

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertOptions& o) {
  word_embeddings = register_module("word_embeddings", bert_embedding(o.vocab_size, o.hidden_size));
  position_embeddings = register_module("position_embeddings",
                                        bert_embedding(o.max_position_embeddings, o.hidden_size));
  token_type_embeddings =
      register_module("token_type_embeddings", bert_embedding(o.type_vocab_size, o.hidden_size));
  LayerNorm = register_module("LayerNorm", bert_layer_norm(o.hidden_size));
  dropout = register_module("dropout", nn::Dropout(o.dropout));
  torch::NoGradGuard no_grad;
  if (kBertPadToken < o.vocab_size) word_embeddings->weight[kBertPadToken].zero_();
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& ids) {
  const int64_t t = ids.size(1);
  torch::Tensor positions = torch::arange(t, ids.options());
  // One segment: token type 0 everywhere.
  torch::Tensor x =
      word_embeddings(ids) + position_embeddings(positions) + token_type_embeddings->weight[0];
  return dropout(LayerNorm(x));
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertOptions& o)
    : heads_(o.num_attention_heads), dropout_(o.dropout) {
  query = register_module("query", bert_linear(o.hidden_size, o.hidden_size));
  key = register_module("key", bert_linear(o.hidden_size, o.hidden_size));
  value = register_module("value", bert_linear(o.hidden_size, o.hidden_size));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
  auto heads = [&](const torch::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
  torch::Tensor y =
      at::scaled_dot_product_attention(heads(query(x)), heads(key(x)), heads(value(x)),
                                       /*attn_mask=*/{}, is_training() ? dropout_ : 0.0,
                                       /*is_causal=*/false);
  return y.transpose(1, 2).contiguous().view({b, t, c});
}

BertResidualOutputImpl::BertResidualOutputImpl(int64_t in, const BertOptions& o) {
  dense = register_module("dense", bert_linear(in, o.hidden_size));
  LayerNorm = register_module("LayerNorm", bert_layer_norm(o.hidden_size));
  dropout = register_module("dropout", nn::Dropout(o.dropout));
}

torch::Tensor BertResidualOutputImpl::forward(const torch::Tensor& x,
                                              const torch::Tensor& residual) {
  return LayerNorm(dropout(dense(x)) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertOptions& o) {
  self = register_module("self", BertSelfAttention(o));
  output = register_module("output", BertResidualOutput(o.hidden_size, o));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& x) { return output(self(x), x); }

BertIntermediateImpl::BertIntermediateImpl(const BertOptions& o) {
  dense = register_module("dense", bert_linear(o.hidden_size, o.intermediate_size));
}

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& x) {
  return torch::gelu(dense(x));  // BERT's "gelu": the exact (erf) form
}

BertLayerImpl::BertLayerImpl(const BertOptions& o) {
  attention = register_module("attention", BertAttention(o));
  intermediate = register_module("intermediate", BertIntermediate(o));
  output = register_module("output", BertResidualOutput(o.intermediate_size, o));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x) {
  torch::Tensor a = attention(x);
  return output(intermediate(a), a);
}

BertEncoderImpl::BertEncoderImpl(const BertOptions& o) {
  layer = register_module("layer", nn::ModuleList());
  for (int64_t i = 0; i < o.num_hidden_layers; ++i) layer->push_back(BertLayer(o));
}

BertBodyImpl::BertBodyImpl(const BertOptions& o) {
  embeddings = register_module("embeddings", BertEmbeddings(o));
  encoder = register_module("encoder", BertEncoder(o));
}

BertHeadTransformImpl::BertHeadTransformImpl(const BertOptions& o) {
  dense = register_module("dense", bert_linear(o.hidden_size, o.hidden_size));
  LayerNorm = register_module("LayerNorm", bert_layer_norm(o.hidden_size));
}

torch::Tensor BertHeadTransformImpl::forward(const torch::Tensor& x) {
  return LayerNorm(torch::gelu(dense(x)));
}

BertPredictionsImpl::BertPredictionsImpl(const BertOptions& o) {
  transform = register_module("transform", BertHeadTransform(o));
  bias = register_parameter("bias", torch::zeros({o.vocab_size}));
}

BertClsImpl::BertClsImpl(const BertOptions& o) {
  predictions = register_module("predictions", BertPredictions(o));
}

BertImpl::BertImpl(const BertOptions& o) : options_(o) {
  DDPX_CHECK(o.vocab_size >= 1 && o.max_position_embeddings >= 1 && o.num_hidden_layers >= 1,
             ErrorKind::kUsage,
             "BERT needs a vocabulary, positions and layers; got vocab_size {}, "
             "max_position_embeddings {}, num_hidden_layers {}",
             o.vocab_size, o.max_position_embeddings, o.num_hidden_layers);
  DDPX_CHECK(o.num_attention_heads >= 1 && o.hidden_size % o.num_attention_heads == 0,
             ErrorKind::kUsage, "BERT hidden_size {} is not divisible by num_attention_heads {}",
             o.hidden_size, o.num_attention_heads);
  bert = register_module("bert", BertBody(o));
  cls = register_module("cls", BertCls(o));
}

torch::Tensor BertImpl::forward(torch::Tensor ids) {
  torch::Tensor x = embed(std::move(ids));
  for (size_t i = 0; i < bert->encoder->layer->size(); ++i)
    x = bert->encoder->layer->ptr<BertLayerImpl>(i)->forward(x);
  return head(x);
}

torch::Tensor BertImpl::embed(torch::Tensor ids) {
  DDPX_CHECK(ids.dim() == 2 && !ids.is_floating_point(), ErrorKind::kUsage,
             "BERT expects (batch, tokens) integer token ids, got {} of shape {}",
             c10::toString(ids.scalar_type()), fmt::join(ids.sizes(), "x"));
  DDPX_CHECK(ids.size(1) <= options_.max_position_embeddings, ErrorKind::kUsage,
             "a sequence of {} tokens is longer than the model's {} positions; use --seq_len {} "
             "or less",
             ids.size(1), options_.max_position_embeddings, options_.max_position_embeddings);
  return bert->embeddings(ids.to(torch::kLong));
}

torch::Tensor BertImpl::head(const torch::Tensor& x) {
  // The decoder, tied to the word embedding: logits (B, T, vocab).
  return torch::nn::functional::linear(cls->predictions->transform(x),
                                       bert->embeddings->word_embeddings->weight,
                                       cls->predictions->bias);
}

int64_t bert_parameter_count(const BertOptions& o) {
  const int64_t h = o.hidden_size, i = o.intermediate_size, ln = 2 * h;
  const int64_t embeddings =
      (o.vocab_size + o.max_position_embeddings + o.type_vocab_size) * h + ln;
  const int64_t per_layer = 4 * (h * h + h) + ln  // query, key, value, attention.output
                            + h * i + i           // intermediate
                            + i * h + h + ln;     // output
  const int64_t head = h * h + h + ln + o.vocab_size;
  return embeddings + o.num_hidden_layers * per_layer + head;
}

}  // namespace ddpx::models
