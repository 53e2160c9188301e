// The GPT family split over a tensor-parallel group (see parallel_gpt.h).
#include "parallel/tensor/parallel_gpt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/linear.h>

#include <algorithm>

#include "core/error.h"
#include "distributed/context.h"
#include "models/gpt.h"
#include "parallel/tensor/parallel_attention.h"
#include "parallel/tensor/parallel_linear.h"
#include "parallel/tensor/region_generator.h"
#include "parallel/tensor/regions.h"
#include "parallel/tensor/split_layers.h"
#include "parallel/tensor/vocab_parallel.h"

namespace ddpx::parallel::tensor {
namespace {

namespace nn = torch::nn;

// c_attn column-parallel in three fused blocks (rank r: q, k and v of heads [r * H/T, ...)),
// c_proj row-parallel; names as GptAttention's.
class ParallelGptAttentionImpl : public nn::Module {
 public:
  ParallelGptAttentionImpl(const models::GptAttention& whole, const models::GptOptions& o,
                           dist::Context& group, RegionGenerator& generator)
      : heads_(o.n_head / group.world_size()),
        head_dim_(o.n_embd / o.n_head),
        dropout_(o.dropout),
        group_(group),
        generator_(generator) {
    c_attn = register_module("c_attn", ColumnParallelLinear(whole->c_attn, group, 3));
    c_proj = register_module("c_proj", RowParallelLinear(whole->c_proj, group));
    resid_dropout = register_module("resid_dropout", whole->resid_dropout);
  }

  // x: (B, T, C) whole -> (B, T, C) whole.
  torch::Tensor forward(const torch::Tensor& x) { return resid_dropout(c_proj(attend(c_attn(x)))); }
  // Sequence parallel: x (B, count, C), this rank's share of `tokens` -> the same share of the
  // output. q, k and v are computed from the gathered sequence, so every rank's heads see every
  // token and the causal mask is the whole sequence's.
  torch::Tensor forward_sequence(const torch::Tensor& x, int64_t tokens) {
    torch::Tensor y = c_proj->forward_partial(attend(c_attn->forward_gathered(x, tokens)));
    y = reduce_scatter_tokens(y, group_);
    if (c_proj->bias.defined()) y = y + c_proj->bias;
    return resid_dropout(y);
  }

  ColumnParallelLinear c_attn{nullptr};
  RowParallelLinear c_proj{nullptr};
  nn::Dropout resid_dropout{nullptr};

 private:
  // qkv: (B, T, 3 * C/T), this rank's heads' q, k, v -> (B, T, C/T), causal.
  torch::Tensor attend(const torch::Tensor& qkv) {
    const int64_t b = qkv.size(0), t = qkv.size(1), width = heads_ * head_dim_;
    std::vector<torch::Tensor> parts = qkv.split(width, /*dim=*/2);
    auto heads = [&](const torch::Tensor& y) {
      return y.view({b, t, heads_, head_dim_}).transpose(1, 2);
    };
    const bool drops = is_training() && dropout_ > 0;
    torch::Tensor y = attend_heads(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                   /*causal=*/true, drops ? dropout_ : 0.0,
                                   drops ? &generator_.get(qkv.device()) : nullptr);
    return y.transpose(1, 2).contiguous().view({b, t, width});
  }

  int64_t heads_, head_dim_;
  double dropout_;
  dist::Context& group_;
  RegionGenerator& generator_;
};
TORCH_MODULE(ParallelGptAttention);

class ParallelGptMlpImpl : public nn::Module {
 public:
  ParallelGptMlpImpl(const models::GptMlp& whole, dist::Context& group) : group_(group) {
    c_fc = register_module("c_fc", ColumnParallelLinear(whole->c_fc, group));
    c_proj = register_module("c_proj", RowParallelLinear(whole->c_proj, group));
    dropout = register_module("dropout", whole->dropout);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return dropout(c_proj(torch::gelu(c_fc(x), "tanh")));
  }
  // Sequence parallel: this rank's share of `tokens` in and out (as the attention's).
  torch::Tensor forward_sequence(const torch::Tensor& x, int64_t tokens) {
    torch::Tensor h = torch::gelu(c_fc->forward_gathered(x, tokens), "tanh");
    torch::Tensor y = reduce_scatter_tokens(c_proj->forward_partial(h), group_);
    if (c_proj->bias.defined()) y = y + c_proj->bias;
    return dropout(y);
  }
  ColumnParallelLinear c_fc{nullptr};
  RowParallelLinear c_proj{nullptr};
  nn::Dropout dropout{nullptr};

 private:
  dist::Context& group_;
};
TORCH_MODULE(ParallelGptMlp);

// A block's LayerNorms and residuals on the whole sequence, or (sequence parallel, `tokens` > 0)
// on this rank's share of it.
class ParallelGptBlockImpl : public nn::Module {
 public:
  ParallelGptBlockImpl(const models::GptBlock& whole, const models::GptOptions& o,
                       dist::Context& group)
      : generator_(group.rank()) {
    ln_1 = register_module("ln_1", whole->ln_1);
    attn = register_module("attn", ParallelGptAttention(whole->attn, o, group, generator_));
    ln_2 = register_module("ln_2", whole->ln_2);
    mlp = register_module("mlp", ParallelGptMlp(whole->mlp, group));
  }
  torch::Tensor forward(torch::Tensor x, int64_t tokens = 0) {
    if (tokens > 0) {
      x = x + attn->forward_sequence(ln_1(x), tokens);
      return x + mlp->forward_sequence(ln_2(x), tokens);
    }
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  // forward() recomputed in backward, the attention dropout's masks replayed
  // (region_generator.h).
  torch::Tensor forward_checkpointed(const torch::Tensor& x, int64_t tokens) {
    auto self = std::dynamic_pointer_cast<ParallelGptBlockImpl>(shared_from_this());
    return checkpoint_replaying(
        [self, tokens](const torch::Tensor& input) { return self->forward(input, tokens); }, x,
        generator_);
  }
  models::GptLayerNorm ln_1{nullptr}, ln_2{nullptr};
  ParallelGptAttention attn{nullptr};
  ParallelGptMlp mlp{nullptr};

 private:
  RegionGenerator generator_;  // the attention dropout's (one a block, as each block's seed)
};
TORCH_MODULE(ParallelGptBlock);

class ParallelGptTransformerImpl : public nn::Module {
 public:
  ParallelGptTransformerImpl(const models::GptTransformer& whole, const models::GptOptions& o,
                             const ShardSpec& vocab_spec, dist::Context& group) {
    wte = register_module("wte", VocabParallelEmbedding(whole->wte->weight, vocab_spec, group));
    wpe = register_module("wpe", whole->wpe);
    drop = register_module("drop", whole->drop);
    h = register_module("h", nn::ModuleList());
    for (size_t i = 0; i < whole->h->size(); ++i) {
      h->push_back(ParallelGptBlock(
          models::GptBlock(std::dynamic_pointer_cast<models::GptBlockImpl>(whole->h->ptr(i))), o,
          group));
    }
    ln_f = register_module("ln_f", whole->ln_f);
  }
  VocabParallelEmbedding wte{nullptr};
  nn::Embedding wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  models::GptLayerNorm ln_f{nullptr};
};
TORCH_MODULE(ParallelGptTransformer);

// idx (B, T) -> this rank's slice of the logits (B, T, V'/T), the padded columns included.
class ParallelGptImpl : public nn::Module {
 public:
  ParallelGptImpl(const models::Gpt& whole, const ShardSpec& vocab_spec, int64_t start,
                  dist::Context& group, bool sequence_parallel,
                  const models::ActivationCheckpointing& checkpointing)
      : options_(whole->options()),
        start_(start),
        group_(group),
        sequence_parallel_(sequence_parallel),
        checkpointing_(checkpointing) {
    transformer = register_module(
        "transformer", ParallelGptTransformer(whole->transformer, options_, vocab_spec, group));
  }
  torch::Tensor forward(torch::Tensor idx) {
    const int64_t t = idx.dim() == 2 ? idx.size(1) : 0;
    torch::Tensor x = embed(std::move(idx));
    const int64_t tokens = sequence_parallel_ ? t : 0;
    for (size_t i = 0; i < transformer->h->size(); ++i) x = block_forward(i, x, tokens);
    return head(x, tokens);
  }

  // idx (B, T) -> (B, T, C) whole, or (sequence parallel) this rank's (B, T/T', C) share.
  torch::Tensor embed(torch::Tensor idx) {
    DDPX_CHECK(idx.dim() == 2 && !idx.is_floating_point(), ErrorKind::kUsage,
               "GPT expects (batch, tokens) integer token ids, got {} of shape {}",
               c10::toString(idx.scalar_type()), fmt::join(idx.sizes(), "x"));
    const int64_t t = idx.size(1);
    DDPX_CHECK(t <= options_.block_size, ErrorKind::kUsage,
               "a sequence of {} tokens is longer than the model's context of {} positions; use "
               "--seq_len {} or less",
               t, options_.block_size, options_.block_size);
    const int ranks = group_.world_size();
    DDPX_CHECK(!sequence_parallel_ || t % ranks == 0, ErrorKind::kUsage,
               "--sequence_parallel: a sequence of {} tokens does not split over the {} ranks of "
               "--tensor_parallel; use a --seq_len that {} divides",
               t, ranks, ranks);
    idx = idx.to(torch::kLong);
    torch::Tensor pos = torch::arange(t, idx.options());
    torch::Tensor x = vocab_parallel_embedding(idx, transformer->wte->weight, start_, group_) +
                      transformer->wpe(pos);
    // Sequence parallel: from here to the output layer each rank holds its 1/T of the tokens.
    if (sequence_parallel_) x = split_tokens(x, group_);
    return transformer->drop(x);
  }

  // Block i: layer i + 1 of the unsplit GPT's sequence (the embedding, the blocks, the head), as
  // models::with_activation_checkpointing counts them. `tokens` > 0: x is this rank's share of a
  // sequence of that many.
  torch::Tensor block_forward(size_t i, const torch::Tensor& x, int64_t tokens) {
    auto block = transformer->h->ptr<ParallelGptBlockImpl>(i);
    return models::checkpoints_layer(checkpointing_, i + 1, transformer->h->size() + 2)
               ? block->forward_checkpointed(x, tokens)
               : block->forward(x, tokens);
  }

  // The final LayerNorm and the tied output layer: this rank's rows of the embedding, its slice
  // of the logits (B, T, V'/T) (the tokens gathered first, sequence parallel).
  torch::Tensor head(const torch::Tensor& h, int64_t tokens) {
    torch::Tensor x = transformer->ln_f(h);
    const torch::Tensor& wte = transformer->wte->weight;
    // (gather_tokens, then the product: the fused gather_tokens_linear takes a bias, which the
    // tied output layer has none of.)
    if (tokens > 0) return nn::functional::linear(gather_tokens(x, tokens, group_), wte);
    return nn::functional::linear(copy_to_region(x, group_), wte);
  }

  // The split GPT as a pipeline cuts it (split_layers.h): the embeddings, each block, the final
  // LayerNorm with the tied output layer.
  std::vector<models::Layer> layers() {
    auto self = std::dynamic_pointer_cast<ParallelGptImpl>(shared_from_this());
    SplitLanguageModel m;
    m.embed = [self](const torch::Tensor& idx) { return self->embed(idx); };
    m.block = [self](size_t i, const torch::Tensor& x, int64_t tokens) {
      return self->block_forward(i, x, tokens);
    };
    m.head = [self](const torch::Tensor& x, int64_t tokens) { return self->head(x, tokens); };
    m.embed_modules = {transformer->wpe.ptr(), transformer->drop.ptr()};
    for (size_t i = 0; i < transformer->h->size(); ++i) {
      m.blocks.push_back(transformer->h->ptr(i));
      m.block_names.push_back("transformer.h." + std::to_string(i));
    }
    m.head_modules = {transformer->ln_f.ptr()};
    m.tied = transformer->wte->weight;
    m.sequence_ranks = sequence_parallel_ ? group_.world_size() : 0;
    return split_layers(m);
  }

  ParallelGptTransformer transformer{nullptr};

 private:
  models::GptOptions options_;
  int64_t start_;
  dist::Context& group_;
  bool sequence_parallel_;
  models::ActivationCheckpointing checkpointing_;
};
TORCH_MODULE(ParallelGpt);

}  // namespace

void check_gpt_splittable(const torch::nn::AnyModule& whole, int ranks,
                          const std::string& model_name, bool /*sequence_parallel*/,
                          const models::ActivationCheckpointing& /*checkpointing*/) {
  // Sequence parallelism and recomputed blocks compose with every split GPT; a --seq_len that
  // the ranks do not divide is refused with the options (train/options.cpp) and by the forward.
  const auto& o = whole.ptr()->as<models::GptImpl>()->options();
  DDPX_CHECK(o.n_head % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: {}'s attention heads ({}) do not split over {} ranks; pick a "
             "--tensor_parallel that divides {}",
             ranks, model_name, o.n_head, ranks, o.n_head);
}

SplitModel split_gpt(const torch::nn::AnyModule& whole, dist::Context& group,
                     bool sequence_parallel, const models::ActivationCheckpointing& checkpointing,
                     int64_t vocab_divisible_by) {
  models::Gpt gpt(std::dynamic_pointer_cast<models::GptImpl>(whole.ptr()));
  const auto& o = gpt->options();
  const int ranks = group.world_size();
  const int64_t vocab = o.vocab_size, padded = padded_vocab(vocab, ranks, vocab_divisible_by);
  const int64_t rows = padded / ranks, start = group.rank() * rows;
  const ShardSpec vocab_spec{0, 1, padded - vocab};
  SplitModel split;
  split.specs["transformer.wte.weight"] = vocab_spec;
  for (int64_t i = 0; i < o.n_layer; ++i) {
    const std::string b = fmt::format("transformer.h.{}.", i);
    split.specs[b + "attn.c_attn.weight"] = {0, 3};
    if (o.bias) split.specs[b + "attn.c_attn.bias"] = {0, 3};
    split.specs[b + "attn.c_proj.weight"] = RowParallelLinearImpl::weight_spec();
    split.specs[b + "mlp.c_fc.weight"] = {0, 1};
    if (o.bias) split.specs[b + "mlp.c_fc.bias"] = {0, 1};
    split.specs[b + "mlp.c_proj.weight"] = RowParallelLinearImpl::weight_spec();
    if (sequence_parallel) {  // applied to this rank's tokens only
      for (const char* name : {"ln_1.weight", "ln_2.weight"})
        split.partial_grads.push_back(b + name);
      if (o.bias) {
        for (const char* name : {"ln_1.bias", "ln_2.bias", "attn.c_proj.bias", "mlp.c_proj.bias"})
          split.partial_grads.push_back(b + name);
      }
    }
  }
  if (sequence_parallel) {
    split.partial_grads.push_back("transformer.ln_f.weight");
    if (o.bias) split.partial_grads.push_back("transformer.ln_f.bias");
  }
  split.summary = fmt::format(
      "{} blocks: {} heads -> {} a rank, MLP width {} -> {}; vocabulary {}{} -> {} rows of the "
      "embedding and the tied output layer a rank{}, the loss from each rank's logits; {}",
      o.n_layer, o.n_head, o.n_head / ranks, 4 * o.n_embd, 4 * o.n_embd / ranks, vocab,
      padded == vocab ? "" : fmt::format(" padded to {}", padded), rows,
      padded == vocab ? ""
                      : fmt::format(" (a multiple of --vocab_divisible_by {} x {}; the padding "
                                    "never predicted)",
                                    std::max<int64_t>(vocab_divisible_by, 1), ranks),
      sequence_parallel ? "sequence parallel: LayerNorms, dropouts and residuals over 1/T of the "
                          "tokens, two all-gathers and two reduce-scatters a block each way"
                        : "two all-reduces a block forward, two backward");
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
  ParallelGpt parallel(gpt, vocab_spec, start, group, sequence_parallel, checkpointing);
  split.layers = parallel->layers();
  split.module = torch::nn::AnyModule(parallel);
  return split;
}

}  // namespace ddpx::parallel::tensor
