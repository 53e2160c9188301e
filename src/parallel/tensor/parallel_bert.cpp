// BERT split over a tensor-parallel group (see parallel_bert.h).
#include "parallel/tensor/parallel_bert.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "distributed/context.h"
#include "models/bert.h"
#include "parallel/tensor/parallel_attention.h"
#include "parallel/tensor/parallel_linear.h"
#include "parallel/tensor/region_generator.h"
#include "parallel/tensor/regions.h"
#include "parallel/tensor/split_layers.h"
#include "parallel/tensor/vocab_parallel.h"

namespace ddpx::parallel::tensor {
namespace {

namespace nn = torch::nn;

// A module that only names others (Hugging Face's `attention`, `self`, `output`, ...).
std::shared_ptr<nn::Module> names(nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<nn::Module>());
}

torch::Tensor plus_bias(const torch::Tensor& x, const torch::Tensor& bias) {
  return bias.defined() ? x + bias : x;
}

// One encoder layer, post-norm as BertLayer; names as BertLayer's.
class ParallelBertLayerImpl : public nn::Module {
 public:
  ParallelBertLayerImpl(const models::BertLayer& whole, const models::BertOptions& o,
                        dist::Context& group)
      : heads_(o.num_attention_heads / group.world_size()),
        head_dim_(o.hidden_size / o.num_attention_heads),
        dropout_(o.dropout),
        group_(group),
        generator_(group.rank()) {
    auto attention = names(*this, "attention");
    auto self = names(*attention, "self");
    const auto& s = whole->attention->self;
    query = self->register_module("query", ColumnParallelLinear(s->query, group));
    key = self->register_module("key", ColumnParallelLinear(s->key, group));
    value = self->register_module("value", ColumnParallelLinear(s->value, group));
    auto attention_output = names(*attention, "output");
    const auto& ao = whole->attention->output;
    attention_dense =
        attention_output->register_module("dense", RowParallelLinear(ao->dense, group));
    attention_norm = attention_output->register_module("LayerNorm", ao->LayerNorm);
    attention_dropout = attention_output->register_module("dropout", ao->dropout);
    auto intermediate = names(*this, "intermediate");
    intermediate_dense = intermediate->register_module(
        "dense", ColumnParallelLinear(whole->intermediate->dense, group));
    auto output = names(*this, "output");
    output_dense = output->register_module("dense", RowParallelLinear(whole->output->dense, group));
    output_norm = output->register_module("LayerNorm", whole->output->LayerNorm);
    output_dropout = output->register_module("dropout", whole->output->dropout);
  }

  // x: (B, T, H) whole, or (sequence parallel, `tokens` > 0) this rank's share (B, count, H).
  torch::Tensor forward(const torch::Tensor& x, int64_t tokens) {
    // q, k and v of this rank's heads in one product: one gradient all-reduce (or one gather).
    const torch::Tensor w = torch::cat({query->weight, key->weight, value->weight});
    const torch::Tensor b = torch::cat({query->bias, key->bias, value->bias});
    if (tokens == 0) {
      torch::Tensor qkv = nn::functional::linear(copy_to_region(x, group_), w, b);
      torch::Tensor a = attention_norm(attention_dropout(attention_dense(attend(qkv))) + x);
      torch::Tensor h = torch::gelu(intermediate_dense(a));
      return output_norm(output_dropout(output_dense(h)) + a);
    }
    torch::Tensor qkv = gather_tokens_linear(x, tokens, w, b, group_);
    torch::Tensor y = reduce_scatter_tokens(attention_dense->forward_partial(attend(qkv)), group_);
    torch::Tensor a = attention_norm(attention_dropout(plus_bias(y, attention_dense->bias)) + x);
    torch::Tensor h = torch::gelu(intermediate_dense->forward_gathered(a, tokens));
    y = reduce_scatter_tokens(output_dense->forward_partial(h), group_);
    return output_norm(output_dropout(plus_bias(y, output_dense->bias)) + a);
  }

  // forward() recomputed in backward, the attention dropout's masks replayed
  // (region_generator.h).
  torch::Tensor forward_checkpointed(const torch::Tensor& x, int64_t tokens) {
    auto self = std::dynamic_pointer_cast<ParallelBertLayerImpl>(shared_from_this());
    return checkpoint_replaying(
        [self, tokens](const torch::Tensor& input) { return self->forward(input, tokens); }, x,
        generator_);
  }

  ColumnParallelLinear query{nullptr}, key{nullptr}, value{nullptr}, intermediate_dense{nullptr};
  RowParallelLinear attention_dense{nullptr}, output_dense{nullptr};
  nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};
  nn::Dropout attention_dropout{nullptr}, output_dropout{nullptr};

 private:
  // qkv: (B, T, 3 * H/T), this rank's heads' q, k, v -> (B, T, H/T), every token seeing every
  // token.
  torch::Tensor attend(const torch::Tensor& qkv) {
    const int64_t batch = qkv.size(0), t = qkv.size(1), width = heads_ * head_dim_;
    std::vector<torch::Tensor> parts = qkv.split(width, /*dim=*/2);
    auto heads = [&](const torch::Tensor& y) {
      return y.view({batch, t, heads_, head_dim_}).transpose(1, 2);
    };
    const bool drops = is_training() && dropout_ > 0;
    torch::Tensor y = attend_heads(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                   /*causal=*/false, drops ? dropout_ : 0.0,
                                   drops ? &generator_.get(qkv.device()) : nullptr);
    return y.transpose(1, 2).contiguous().view({batch, t, width});
  }

  int64_t heads_, head_dim_;
  double dropout_;
  dist::Context& group_;
  RegionGenerator generator_;
};
TORCH_MODULE(ParallelBertLayer);

// ids (B, T) -> this rank's slice of the MLM logits (B, T, V'/T), the padded columns included.
class ParallelBertImpl : public nn::Module {
 public:
  ParallelBertImpl(const models::Bert& whole, const ShardSpec& vocab_spec, int64_t start,
                   dist::Context& group, bool sequence_parallel,
                   const models::ActivationCheckpointing& checkpointing)
      : whole_(whole),
        start_(start),
        group_(group),
        sequence_parallel_(sequence_parallel),
        checkpointing_(checkpointing) {
    auto bert = names(*this, "bert");
    auto embeddings = names(*bert, "embeddings");
    const auto& e = whole->bert->embeddings;
    word_embeddings = embeddings->register_module(
        "word_embeddings", VocabParallelEmbedding(e->word_embeddings->weight, vocab_spec, group));
    embeddings->register_module("position_embeddings", e->position_embeddings);
    embeddings->register_module("token_type_embeddings", e->token_type_embeddings);
    embeddings->register_module("LayerNorm", e->LayerNorm);
    embeddings->register_module("dropout", e->dropout);
    auto encoder = names(*bert, "encoder");
    layer = encoder->register_module("layer", nn::ModuleList());
    for (size_t i = 0; i < whole->bert->encoder->layer->size(); ++i) {
      layer->push_back(
          ParallelBertLayer(models::BertLayer(std::dynamic_pointer_cast<models::BertLayerImpl>(
                                whole->bert->encoder->layer->ptr(i))),
                            whole->options(), group));
    }
    auto cls = names(*this, "cls");
    auto predictions = names(*cls, "predictions");
    predictions->register_module("transform", whole->cls->predictions->transform);
    torch::NoGradGuard no_grad;
    decoder_bias = predictions->register_parameter(
        "bias",
        take_shard(whole->cls->predictions->bias, vocab_spec, group.rank(), group.world_size()));
  }

  torch::Tensor forward(torch::Tensor ids) {
    const int64_t t = ids.dim() == 2 ? ids.size(1) : 0;
    torch::Tensor x = embed(std::move(ids));
    const int64_t tokens = sequence_parallel_ ? t : 0;
    for (size_t i = 0; i < layer->size(); ++i) x = layer_forward(i, x, tokens);
    return head(x, tokens);
  }

  // ids (B, T) -> (B, T, H) whole, or (sequence parallel) this rank's (B, T/T', H) share.
  torch::Tensor embed(torch::Tensor ids) {
    DDPX_CHECK(ids.dim() == 2 && !ids.is_floating_point(), ErrorKind::kUsage,
               "BERT expects (batch, tokens) integer token ids, got {} of shape {}",
               c10::toString(ids.scalar_type()), fmt::join(ids.sizes(), "x"));
    const auto& o = whole_->options();
    const int64_t t = ids.size(1);
    DDPX_CHECK(t <= o.max_position_embeddings, ErrorKind::kUsage,
               "a sequence of {} tokens is longer than the model's {} positions; use --seq_len {} "
               "or less",
               t, o.max_position_embeddings, o.max_position_embeddings);
    const int ranks = group_.world_size();
    DDPX_CHECK(!sequence_parallel_ || t % ranks == 0, ErrorKind::kUsage,
               "--sequence_parallel: a sequence of {} tokens does not split over the {} ranks of "
               "--tensor_parallel; use a --seq_len that {} divides",
               t, ranks, ranks);
    ids = ids.to(torch::kLong);
    models::BertEmbeddings e = whole_->bert->embeddings;
    torch::Tensor x = vocab_parallel_embedding(ids, word_embeddings->weight, start_, group_) +
                      e->position_embeddings(torch::arange(t, ids.options())) +
                      e->token_type_embeddings->weight[0];
    x = e->dropout(e->LayerNorm(x));
    // Sequence parallel: from here to the decoder each rank holds its 1/T of the tokens.
    return sequence_parallel_ ? split_tokens(x, group_) : x;
  }

  // Encoder layer i: layer i + 1 of the unsplit BERT's sequence (the embeddings, the encoder
  // layers, the head), as models::with_activation_checkpointing counts them. `tokens` > 0: x is
  // this rank's share of a sequence of that many.
  torch::Tensor layer_forward(size_t i, const torch::Tensor& x, int64_t tokens) {
    auto l = layer->ptr<ParallelBertLayerImpl>(i);
    return models::checkpoints_layer(checkpointing_, i + 1, layer->size() + 2)
               ? l->forward_checkpointed(x, tokens)
               : l->forward(x, tokens);
  }

  // The MLM head's transform and the decoder tied to this rank's rows of the word embedding: its
  // slice of the logits (B, T, V'/T) (the tokens gathered first, sequence parallel).
  torch::Tensor head(const torch::Tensor& h, int64_t tokens) {
    torch::Tensor x = whole_->cls->predictions->transform(h);
    const torch::Tensor& w = word_embeddings->weight;
    if (tokens > 0) return gather_tokens_linear(x, tokens, w, decoder_bias, group_);
    return nn::functional::linear(copy_to_region(x, group_), w, decoder_bias);
  }

  // The split BERT as a pipeline cuts it (split_layers.h): the embeddings, each encoder layer,
  // the MLM head with the tied decoder and this rank's columns of its bias.
  std::vector<models::Layer> layers() {
    auto self = std::dynamic_pointer_cast<ParallelBertImpl>(shared_from_this());
    const models::BertEmbeddings& e = whole_->bert->embeddings;
    SplitLanguageModel m;
    m.embed = [self](const torch::Tensor& ids) { return self->embed(ids); };
    m.block = [self](size_t i, const torch::Tensor& x, int64_t tokens) {
      return self->layer_forward(i, x, tokens);
    };
    m.head = [self](const torch::Tensor& x, int64_t tokens) { return self->head(x, tokens); };
    m.embed_modules = {e->position_embeddings.ptr(), e->token_type_embeddings.ptr(),
                       e->LayerNorm.ptr(), e->dropout.ptr()};
    for (size_t i = 0; i < layer->size(); ++i) {
      m.blocks.push_back(layer->ptr(i));
      m.block_names.push_back("bert.encoder.layer." + std::to_string(i));
    }
    m.head_modules = {whole_->cls->predictions->transform.ptr()};
    m.tied = word_embeddings->weight;
    m.head_extra = {decoder_bias};
    m.sequence_ranks = sequence_parallel_ ? group_.world_size() : 0;
    return split_layers(m);
  }

  VocabParallelEmbedding word_embeddings{nullptr};
  nn::ModuleList layer{nullptr};
  torch::Tensor decoder_bias;  // this rank's columns of cls.predictions.bias

 private:
  models::Bert whole_;
  int64_t start_;
  dist::Context& group_;
  bool sequence_parallel_;
  models::ActivationCheckpointing checkpointing_;
};
TORCH_MODULE(ParallelBert);

}  // namespace

void check_bert_splittable(const torch::nn::AnyModule& whole, int ranks,
                           const std::string& model_name) {
  // Sequence parallelism and recomputed layers compose with every split BERT.
  const auto& o = whole.ptr()->as<models::BertImpl>()->options();
  DDPX_CHECK(o.num_attention_heads % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: {}'s attention heads ({}) do not split over {} ranks; pick a "
             "--tensor_parallel that divides {}",
             ranks, model_name, o.num_attention_heads, ranks, o.num_attention_heads);
  DDPX_CHECK(o.intermediate_size % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: {}'s intermediate width ({}) does not split over {} ranks; "
             "pick a --tensor_parallel that divides {}",
             ranks, model_name, o.intermediate_size, ranks, o.intermediate_size);
}

SplitModel split_bert(const torch::nn::AnyModule& whole, dist::Context& group,
                      bool sequence_parallel, const models::ActivationCheckpointing& checkpointing,
                      int64_t vocab_divisible_by) {
  models::Bert bert(std::dynamic_pointer_cast<models::BertImpl>(whole.ptr()));
  const auto& o = bert->options();
  const int ranks = group.world_size();
  const int64_t vocab = o.vocab_size, padded = padded_vocab(vocab, ranks, vocab_divisible_by);
  const int64_t rows = padded / ranks, start = group.rank() * rows;
  const ShardSpec vocab_spec{0, 1, padded - vocab};
  SplitModel split;
  split.specs["bert.embeddings.word_embeddings.weight"] = vocab_spec;
  split.specs["cls.predictions.bias"] = vocab_spec;
  for (int64_t i = 0; i < o.num_hidden_layers; ++i) {
    const std::string b = fmt::format("bert.encoder.layer.{}.", i);
    for (const char* name : {"attention.self.query.", "attention.self.key.",
                             "attention.self.value.", "intermediate.dense."}) {
      split.specs[b + name + "weight"] = {0, 1};
      split.specs[b + name + "bias"] = {0, 1};
    }
    split.specs[b + "attention.output.dense.weight"] = RowParallelLinearImpl::weight_spec();
    split.specs[b + "output.dense.weight"] = RowParallelLinearImpl::weight_spec();
    if (sequence_parallel) {  // applied to this rank's tokens only
      for (const char* name : {"attention.output.dense.bias", "attention.output.LayerNorm.weight",
                               "attention.output.LayerNorm.bias", "output.dense.bias",
                               "output.LayerNorm.weight", "output.LayerNorm.bias"}) {
        split.partial_grads.push_back(b + name);
      }
    }
  }
  if (sequence_parallel) {
    for (const char* name : {"dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias"})
      split.partial_grads.push_back(std::string("cls.predictions.transform.") + name);
  }
  split.summary = fmt::format(
      "{} layers: {} heads -> {} a rank, intermediate width {} -> {}; vocabulary {}{} -> {} rows "
      "of the word embedding and the tied decoder a rank{}, the masked-LM loss from each rank's "
      "logits; {}",
      o.num_hidden_layers, o.num_attention_heads, o.num_attention_heads / ranks,
      o.intermediate_size, o.intermediate_size / ranks, vocab,
      padded == vocab ? "" : fmt::format(" padded to {}", padded), rows,
      padded == vocab ? ""
                      : fmt::format(" (a multiple of --vocab_divisible_by {} x {}; the padding "
                                    "never predicted)",
                                    std::max<int64_t>(vocab_divisible_by, 1), ranks),
      sequence_parallel ? "sequence parallel: LayerNorms, dropouts and residuals over 1/T of the "
                          "tokens, two all-gathers and two reduce-scatters a layer each way"
                        : "two all-reduces a layer forward, two backward");
  dist::Context* g = &group;
  split.loss = [start, vocab, g](const torch::Tensor& logits, const torch::Tensor& labels,
                                 double smoothing) {
    return vocab_parallel_cross_entropy(logits, labels, start, vocab, smoothing, *g);
  };
  split.predict = [start, vocab, g](const torch::Tensor& logits) {
    return vocab_parallel_argmax(logits, start, vocab, *g);
  };
  split.gather = [vocab, g](const torch::Tensor& logits) {
    return gather_vocab(logits, vocab, *g);
  };
  ParallelBert parallel(bert, vocab_spec, start, group, sequence_parallel, checkpointing);
  split.layers = parallel->layers();
  split.module = torch::nn::AnyModule(parallel);
  return split;
}

}  // namespace ddpx::parallel::tensor
