// The GPT family split over a tensor-parallel group (see parallel_gpt.h).
#include "parallel/tensor/parallel_gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/linear.h>

#include <cmath>
#include <mutex>

#include "core/error.h"
#include "distributed/context.h"
#include "models/gpt.h"
#include "parallel/tensor/parallel_linear.h"
#include "parallel/tensor/regions.h"
#include "parallel/tensor/vocab_parallel.h"

namespace ddpx::parallel::tensor {
namespace {

namespace nn = torch::nn;

// c_attn column-parallel in three fused blocks (rank r: q, k and v of heads [r * H/T, ...)),
// c_proj row-parallel; names as GptAttention's.
class ParallelGptAttentionImpl : public nn::Module {
 public:
  ParallelGptAttentionImpl(const models::GptAttention& whole, const models::GptOptions& o,
                           dist::Context& group)
      : heads_(o.n_head / group.world_size()), head_dim_(o.n_embd / o.n_head), dropout_(o.dropout) {
    c_attn = register_module("c_attn", ColumnParallelLinear(whole->c_attn, group, 3));
    c_proj = register_module("c_proj", RowParallelLinear(whole->c_proj, group));
    resid_dropout = register_module("resid_dropout", whole->resid_dropout);
    // Megatron-LM's model-parallel seed: the default seed, moved by a constant and the rank.
    region_seed_ = at::detail::getDefaultCPUGenerator().current_seed() + 2718 +
                   static_cast<uint64_t>(group.rank());
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), width = heads_ * head_dim_;
    std::vector<torch::Tensor> qkv = c_attn(x).split(width, /*dim=*/2);  // this rank's heads
    auto heads = [&](const torch::Tensor& y) {
      return y.view({b, t, heads_, head_dim_}).transpose(1, 2);
    };
    torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]), y;
    if (is_training() && dropout_ > 0) {
      // SDPA's arithmetic, its dropout drawn from the region's generator.
      torch::Tensor scores =
          at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim_));
      torch::Tensor future = torch::ones({t, t}, torch::dtype(torch::kBool).device(x.device()));
      torch::Tensor weights = torch::softmax(scores.masked_fill(future.triu(1), -INFINITY), -1);
      torch::Tensor keep;
      {
        torch::NoGradGuard no_grad;
        keep = at::empty_like(weights).bernoulli_(1 - dropout_, region_generator(x.device()));
      }
      y = at::matmul(weights * keep / (1 - dropout_), v);
    } else {
      y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, 0.0, /*is_causal=*/true);
    }
    y = y.transpose(1, 2).contiguous().view({b, t, width});
    return resid_dropout(c_proj(y));
  }

  ColumnParallelLinear c_attn{nullptr};
  RowParallelLinear c_proj{nullptr};
  nn::Dropout resid_dropout{nullptr};

 private:
  at::Generator& region_generator(const torch::Device& device) {
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

  int64_t heads_, head_dim_;
  double dropout_;
  uint64_t region_seed_ = 0;
  at::Generator region_;
};
TORCH_MODULE(ParallelGptAttention);

class ParallelGptMlpImpl : public nn::Module {
 public:
  ParallelGptMlpImpl(const models::GptMlp& whole, dist::Context& group) {
    c_fc = register_module("c_fc", ColumnParallelLinear(whole->c_fc, group));
    c_proj = register_module("c_proj", RowParallelLinear(whole->c_proj, group));
    dropout = register_module("dropout", whole->dropout);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return dropout(c_proj(torch::gelu(c_fc(x), "tanh")));
  }
  ColumnParallelLinear c_fc{nullptr};
  RowParallelLinear c_proj{nullptr};
  nn::Dropout dropout{nullptr};
};
TORCH_MODULE(ParallelGptMlp);

class ParallelGptBlockImpl : public nn::Module {
 public:
  ParallelGptBlockImpl(const models::GptBlock& whole, const models::GptOptions& o,
                       dist::Context& group) {
    ln_1 = register_module("ln_1", whole->ln_1);
    attn = register_module("attn", ParallelGptAttention(whole->attn, o, group));
    ln_2 = register_module("ln_2", whole->ln_2);
    mlp = register_module("mlp", ParallelGptMlp(whole->mlp, group));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  models::GptLayerNorm ln_1{nullptr}, ln_2{nullptr};
  ParallelGptAttention attn{nullptr};
  ParallelGptMlp mlp{nullptr};
};
TORCH_MODULE(ParallelGptBlock);

// This rank's rows of the padded vocabulary's token embedding, named `weight`.
class VocabParallelEmbeddingImpl : public nn::Module {
 public:
  VocabParallelEmbeddingImpl(const torch::Tensor& whole, const ShardSpec& spec,
                             dist::Context& group) {
    torch::NoGradGuard no_grad;
    weight =
        register_parameter("weight", take_shard(whole, spec, group.rank(), group.world_size()));
  }
  torch::Tensor weight;
};
TORCH_MODULE(VocabParallelEmbedding);

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
                  dist::Context& group)
      : options_(whole->options()), start_(start), group_(group) {
    transformer = register_module(
        "transformer", ParallelGptTransformer(whole->transformer, options_, vocab_spec, group));
  }
  torch::Tensor forward(torch::Tensor idx) {
    DDPX_CHECK(idx.dim() == 2 && !idx.is_floating_point(), ErrorKind::kUsage,
               "GPT expects (batch, tokens) integer token ids, got {} of shape {}",
               c10::toString(idx.scalar_type()), fmt::join(idx.sizes(), "x"));
    const int64_t t = idx.size(1);
    DDPX_CHECK(t <= options_.block_size, ErrorKind::kUsage,
               "a sequence of {} tokens is longer than the model's context of {} positions; use "
               "--seq_len {} or less",
               t, options_.block_size, options_.block_size);
    idx = idx.to(torch::kLong);
    torch::Tensor pos = torch::arange(t, idx.options());
    const torch::Tensor& wte = transformer->wte->weight;
    torch::Tensor x = transformer->drop(vocab_parallel_embedding(idx, wte, start_, group_) +
                                        transformer->wpe(pos));
    for (size_t i = 0; i < transformer->h->size(); ++i)
      x = transformer->h->ptr<ParallelGptBlockImpl>(i)->forward(x);
    x = transformer->ln_f(x);
    // The tied output layer: this rank's rows of the embedding, its slice of the logits.
    return nn::functional::linear(copy_to_region(x, group_), wte);
  }
  ParallelGptTransformer transformer{nullptr};

 private:
  models::GptOptions options_;
  int64_t start_;
  dist::Context& group_;
};
TORCH_MODULE(ParallelGpt);

}  // namespace

void check_gpt_splittable(const torch::nn::AnyModule& whole, int ranks,
                          const std::string& model_name, bool sequence_parallel,
                          const models::ActivationCheckpointing& checkpointing) {
  const auto& o = whole.ptr()->as<models::GptImpl>()->options();
  DDPX_CHECK(!sequence_parallel, ErrorKind::kUsage,
             "--sequence_parallel with {}: a GPT's blocks split over heads only so far; drop "
             "--sequence_parallel",
             model_name);
  DDPX_CHECK(checkpointing.every == 0, ErrorKind::kUsage,
             "--activation_checkpointing with --tensor_parallel {}: {}'s split blocks are not "
             "recomputed yet; drop --activation_checkpointing",
             ranks, model_name);
  DDPX_CHECK(o.n_head % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: {}'s attention heads ({}) do not split over {} ranks; pick a "
             "--tensor_parallel that divides {}",
             ranks, model_name, o.n_head, ranks, o.n_head);
}

SplitModel split_gpt(const torch::nn::AnyModule& whole, dist::Context& group) {
  models::Gpt gpt(std::dynamic_pointer_cast<models::GptImpl>(whole.ptr()));
  const auto& o = gpt->options();
  const int ranks = group.world_size();
  const int64_t vocab = o.vocab_size, padded = padded_vocab(vocab, ranks);
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
  }
  split.summary = fmt::format(
      "{} blocks: {} heads -> {} a rank, MLP width {} -> {}; vocabulary {}{} -> {} rows of the "
      "embedding and the tied output layer a rank, the loss from each rank's logits; two "
      "all-reduces a block forward, two backward",
      o.n_layer, o.n_head, o.n_head / ranks, 4 * o.n_embd, 4 * o.n_embd / ranks, vocab,
      padded == vocab ? "" : fmt::format(" padded to {}", padded), rows);
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
  split.module = torch::nn::AnyModule(ParallelGpt(gpt, vocab_spec, start, group));
  return split;
}

}  // namespace ddpx::parallel::tensor
