// The tensor-parallel plans of the zoo's ViTs and MLP, and of a user's Sequential (see
// parallelize.h).
#include "parallel/tensor/parallelize.h"

#include <fmt/format.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"
#include "distributed/context.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/vit.h"
#include "parallel/tensor/parallel_attention.h"
#include "parallel/tensor/parallel_bert.h"
#include "parallel/tensor/parallel_gpt.h"
#include "parallel/tensor/parallel_linear.h"
#include "parallel/tensor/regions.h"

namespace ddpx::parallel::tensor {
namespace {

namespace nn = torch::nn;

nn::Linear linear_at(const nn::Sequential& seq, size_t i) {
  return nn::Linear(seq->ptr<nn::LinearImpl>(i));
}

nn::AnyModule any_at(const nn::Sequential& seq, size_t i) {
  return *(seq->begin() + static_cast<std::ptrdiff_t>(i));
}

// torchvision's EncoderBlock with its attention and MLP split; LayerNorms and dropouts shared with
// the whole block.
class ParallelViTBlockImpl : public nn::Module {
 public:
  ParallelViTBlockImpl(const models::ViTEncoderBlock& whole, dist::Context& group) : group_(group) {
    ln_1 = register_module("ln_1", whole->ln_1);
    self_attention =
        register_module("self_attention", ParallelSelfAttention(whole->self_attention, group));
    dropout = register_module("dropout", whole->dropout);
    ln_2 = register_module("ln_2", whole->ln_2);
    const auto& m = whole->mlp;  // Linear, GELU, Dropout, Linear, Dropout (mlp.0 ... mlp.4)
    mlp = register_module(
        "mlp",
        nn::Sequential(ColumnParallelLinear(linear_at(m, 0), group), any_at(m, 1), any_at(m, 2),
                       RowParallelLinear(linear_at(m, 3), group), any_at(m, 4)));
  }
  torch::Tensor forward(torch::Tensor input) {
    torch::Tensor x = dropout(self_attention(ln_1(input))) + input;
    return x + mlp->forward(ln_2(x));
  }
  // Sequence parallel: input (B, count, D), this rank's share of `tokens` (regions.h); the
  // layers that read the LayerNorms' outputs gather them, keeping only the share for backward.
  torch::Tensor forward_sequence(torch::Tensor input, int64_t tokens) {
    torch::Tensor a = self_attention->forward_partial_gathered(ln_1(input), tokens);
    torch::Tensor x =
        dropout(with_bias(reduce_scatter_tokens(a, group_), self_attention->out_proj->bias)) +
        input;
    torch::Tensor h = mlp->ptr<ColumnParallelLinearImpl>(0)->forward_gathered(ln_2(x), tokens);
    h = any_at(mlp, 2).forward(any_at(mlp, 1).forward(h));
    auto fc2 = mlp->ptr<RowParallelLinearImpl>(3);
    h = with_bias(reduce_scatter_tokens(fc2->forward_partial(h), group_), fc2->bias);
    return x + any_at(mlp, 4).forward(h);
  }

  // forward() or forward_sequence() recomputed in backward (checkpoint()), the attention
  // dropout's generator replayed from where the first forward found it and then put back where
  // the forward left it, so the recompute draws the same masks and later draws are unchanged.
  torch::Tensor forward_checkpointed(const torch::Tensor& input, int64_t tokens) {
    auto self = std::dynamic_pointer_cast<ParallelViTBlockImpl>(shared_from_this());
    auto first = std::make_shared<torch::Tensor>();  // the generator's state at the first forward
    models::BlockForward fn = [self, first, tokens](const torch::Tensor& x) {
      auto run = [&] { return tokens > 0 ? self->forward_sequence(x, tokens) : self->forward(x); };
      auto& attention = *self->self_attention;
      if (!attention.drops()) return run();
      if (!first->defined()) {
        *first = attention.region_state(x.device());
        return run();
      }
      const torch::Tensor after = attention.region_state(x.device());
      attention.set_region_state(*first, x.device());
      torch::Tensor y = run();
      attention.set_region_state(after, x.device());
      return y;
    };
    return models::checkpoint(fn, input);
  }

  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  ParallelSelfAttention self_attention{nullptr};
  nn::Dropout dropout{nullptr};
  nn::Sequential mlp{nullptr};

 private:
  static torch::Tensor with_bias(const torch::Tensor& x, const torch::Tensor& bias) {
    return bias.defined() ? x + bias : x;
  }
  dist::Context& group_;
};
TORCH_MODULE(ParallelViTBlock);

class ParallelViTEncoderImpl : public nn::Module {
 public:
  ParallelViTEncoderImpl(const models::ViTEncoder& whole, dist::Context& group) {
    register_parameter("pos_embedding", whole->pos_embedding);
    register_module("dropout", whole->dropout);
    layers = register_module("layers", nn::Sequential());
    for (const auto& child : whole->layers->named_children()) {
      auto block = std::dynamic_pointer_cast<models::ViTEncoderBlockImpl>(child.value());
      layers->push_back(std::string(child.key()),
                        ParallelViTBlock(models::ViTEncoderBlock(block), group));
    }
    register_module("ln", whole->ln);
  }
  nn::Sequential layers{nullptr};
};
TORCH_MODULE(ParallelViTEncoder);

// The whole ViT's embedding and head around the split blocks; names as torchvision's.
class ParallelViTImpl : public nn::Module {
 public:
  ParallelViTImpl(models::VisionTransformer whole, dist::Context& group, bool sequence_parallel,
                  const models::ActivationCheckpointing& checkpointing,
                  std::vector<int64_t> sample_shape)
      : whole_(std::move(whole)),
        group_(group),
        sequence_parallel_(sequence_parallel),
        checkpointing_(checkpointing),
        sample_shape_(std::move(sample_shape)) {
    register_module("conv_proj", whole_->conv_proj);
    register_parameter("class_token", whole_->class_token);
    encoder = register_module("encoder", ParallelViTEncoder(whole_->encoder, group));
    register_module("heads", whole_->heads);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = whole_->embed(std::move(x));
    const int64_t tokens = x.size(1);
    if (sequence_parallel_) x = split_tokens(x, group_);
    const size_t blocks = encoder->layers->size();
    for (size_t i = 0; i < blocks; ++i) x = block_forward(i, x, sequence_parallel_ ? tokens : 0);
    return whole_->head(sequence_parallel_ ? whole_tokens(x, tokens, group_) : x);
  }

  // Layer i + 1 of the layer sequence (the embedding, the blocks, the head); `tokens` > 0: x is
  // this rank's share of a sequence of that many (sequence parallel).
  torch::Tensor block_forward(size_t i, const torch::Tensor& x, int64_t tokens) {
    auto block = encoder->layers->ptr<ParallelViTBlockImpl>(i);
    if (models::checkpoints_layer(checkpointing_, i + 1, encoder->layers->size() + 2))
      return block->forward_checkpointed(x, tokens);
    return tokens > 0 ? block->forward_sequence(x, tokens) : block->forward(x);
  }

  // The class token and a token a patch of the images the layers will see (the model's own size
  // where none was given). A pipeline's later stages never see an image, so their layers take the
  // length from here.
  int64_t sequence_length() const {
    const auto& o = whole_->options();
    const bool given = sample_shape_.size() == 3;
    const int64_t h = given ? sample_shape_[1] : o.image_size;
    const int64_t w = given ? sample_shape_[2] : o.image_size;
    return 1 + (h / o.patch_size) * (w / o.patch_size);
  }

  std::vector<models::Layer> layers() {
    auto self = std::dynamic_pointer_cast<ParallelViTImpl>(shared_from_this());
    std::vector<models::Layer> out;
    auto tensors = [](const std::vector<std::shared_ptr<nn::Module>>& modules,
                      std::vector<torch::Tensor> extra, models::Layer& layer) {
      layer.parameters = std::move(extra);
      for (const auto& m : modules) {
        for (auto& p : m->parameters()) layer.parameters.push_back(p);
        for (auto& b : m->buffers()) layer.buffers.push_back(b);
      }
    };
    // Sequence parallel: the stages pass this rank's share of the tokens on (B, count, D).
    const int64_t tokens = sequence_parallel_ ? sequence_length() : 0;
    models::Layer embed{"embed",
                        [self, tokens](const torch::Tensor& x) {
                          torch::Tensor y = self->whole_->embed(x);
                          if (tokens == 0) return y;
                          DDPX_CHECK(y.size(1) == tokens, ErrorKind::kUsage,
                                     "--sequence_parallel in a pipeline: the images make {} "
                                     "tokens where the plan was built for {}; give the plan the "
                                     "images' (C, H, W) (PipelineOptions::sample_shape)",
                                     y.size(1), tokens);
                          return split_tokens(y, self->group_);
                        },
                        {},
                        {}};
    tensors({whole_->conv_proj.ptr(), whole_->encoder->dropout.ptr()},
            {whole_->class_token, whole_->encoder->pos_embedding}, embed);
    out.push_back(std::move(embed));
    const auto names = encoder->layers->named_children();
    for (size_t i = 0; i < encoder->layers->size(); ++i) {
      models::Layer block{
          "encoder.layers." + names[i].key(),
          [self, i, tokens](const torch::Tensor& x) { return self->block_forward(i, x, tokens); },
          {},
          {}};
      tensors({encoder->layers->ptr(i)}, {}, block);
      out.push_back(std::move(block));
    }
    models::Layer head{
        "head",
        [self, tokens](const torch::Tensor& x) {
          return self->whole_->head(tokens > 0 ? whole_tokens(x, tokens, self->group_) : x);
        },
        {},
        {}};
    tensors({whole_->encoder->ln.ptr(), whole_->heads.ptr()}, {}, head);
    out.push_back(std::move(head));
    return out;
  }

  ParallelViTEncoder encoder{nullptr};

 private:
  models::VisionTransformer whole_;
  dist::Context& group_;
  bool sequence_parallel_;
  models::ActivationCheckpointing checkpointing_;
  std::vector<int64_t> sample_shape_;
};
TORCH_MODULE(ParallelViT);

class ParallelMlpImpl : public nn::Module {
 public:
  ParallelMlpImpl(const models::Mlp& whole, dist::Context& group,
                  const models::ActivationCheckpointing& checkpointing)
      : in_features_(whole->in_features), checkpointing_(checkpointing) {
    fc1 = register_module("fc1", ColumnParallelLinear(whole->fc1, group));
    fc2 = register_module("fc2", RowParallelLinear(whole->fc2, group));
    fc3 = register_module("fc3", whole->fc3);
  }
  torch::Tensor forward(torch::Tensor x) { return third(second(first(x))); }
  torch::Tensor first(const torch::Tensor& x) {
    DDPX_CHECK(x.dim() >= 2 && x[0].numel() == in_features_, ErrorKind::kUsage,
               "mlp expects {} input features per sample (3 x image_size^2)", in_features_);
    return torch::relu(fc1(x.flatten(1)));  // (B, hidden / T)
  }
  torch::Tensor second(const torch::Tensor& x) {
    // Layer 1 of 3 (fc1, fc2, fc3), as the unsplit MLP's layer sequence counts them.
    if (models::checkpoints_layer(checkpointing_, 1, 3)) {
      auto self = std::dynamic_pointer_cast<ParallelMlpImpl>(shared_from_this());
      return models::checkpoint(
          [self](const torch::Tensor& h) { return torch::relu(self->fc2(h)); }, x);
    }
    return torch::relu(fc2(x));  // (B, hidden / 2), whole
  }
  torch::Tensor third(const torch::Tensor& x) { return fc3->forward(x); }

  std::vector<models::Layer> layers() {
    auto self = std::dynamic_pointer_cast<ParallelMlpImpl>(shared_from_this());
    return {
        {"fc1", [self](const torch::Tensor& x) { return self->first(x); }, fc1->parameters(), {}},
        {"fc2", [self](const torch::Tensor& x) { return self->second(x); }, fc2->parameters(), {}},
        {"fc3", [self](const torch::Tensor& x) { return self->third(x); }, fc3->parameters(), {}}};
  }

  ColumnParallelLinear fc1{nullptr};
  RowParallelLinear fc2{nullptr};
  nn::Linear fc3{nullptr};

 private:
  int64_t in_features_;
  models::ActivationCheckpointing checkpointing_;
};
TORCH_MODULE(ParallelMlp);

void check_splits(int64_t size, int ranks, const std::string& what) {
  DDPX_CHECK(size % ranks == 0, ErrorKind::kUsage,
             "--tensor_parallel {}: {} ({}) do not split over {} ranks; pick a --tensor_parallel "
             "that divides {}",
             ranks, what, size, ranks, size);
}

}  // namespace

void check_splittable(const torch::nn::AnyModule& whole, int ranks, const std::string& model_name,
                      bool sequence_parallel,
                      const models::ActivationCheckpointing& checkpointing) {
  auto* module = whole.ptr().get();
  if (module->as<models::GptImpl>() != nullptr) {
    check_gpt_splittable(whole, ranks, model_name, sequence_parallel, checkpointing);
    return;
  }
  if (module->as<models::BertImpl>() != nullptr) {
    check_bert_splittable(whole, ranks, model_name);
    return;
  }
  DDPX_CHECK(!sequence_parallel || module->as<models::VisionTransformerImpl>() != nullptr,
             ErrorKind::kUsage,
             "--sequence_parallel: {} has no sequence of tokens to split; only the ViTs, the GPT "
             "family and BERT have, or drop --sequence_parallel",
             model_name);
  if (auto* vit = module->as<models::VisionTransformerImpl>()) {
    auto block = vit->encoder->layers->ptr<models::ViTEncoderBlockImpl>(0);
    const auto& attention = block->self_attention->options;
    check_splits(attention.num_heads(), ranks, fmt::format("{}'s attention heads", model_name));
    check_splits(block->mlp->ptr<nn::LinearImpl>(0)->options.out_features(), ranks,
                 fmt::format("{}'s MLP features", model_name));
    return;
  }
  if (auto* mlp = module->as<models::MlpImpl>()) {
    check_splits(mlp->fc1->options.out_features(), ranks, "mlp's hidden features");
    return;
  }
  throw Error(
      ErrorKind::kUsage,
      fmt::format(
          "--tensor_parallel {}: {} has no tensor-parallel plan; the models that "
          "have one are the ViTs (vit_b_16, vit_b_32, vit_l_16, their timm names, "
          "vit_tiny_patch4_32), the GPT family (gpt-nano, gpt2 ... gpt2-xl), BERT (bert-nano, "
          "bert-base, bert-large) and mlp",
          ranks, model_name));
}

SplitModel split_model(const torch::nn::AnyModule& whole, dist::Context& group,
                       bool sequence_parallel, const models::ActivationCheckpointing& checkpointing,
                       const std::vector<int64_t>& sample_shape, int64_t vocab_divisible_by) {
  SplitModel split;
  const int ranks = group.world_size();
  auto* module = whole.ptr().get();
  if (module->as<models::GptImpl>() != nullptr)
    return split_gpt(whole, group, sequence_parallel, checkpointing, vocab_divisible_by);
  if (module->as<models::BertImpl>() != nullptr)
    return split_bert(whole, group, sequence_parallel, checkpointing, vocab_divisible_by);
  if (auto* vit = module->as<models::VisionTransformerImpl>()) {
    auto holder = models::VisionTransformer(
        std::dynamic_pointer_cast<models::VisionTransformerImpl>(whole.ptr()));
    ParallelViT parallel(holder, group, sequence_parallel, checkpointing, sample_shape);
    const auto blocks = vit->encoder->layers->size();
    for (size_t i = 0; i < blocks; ++i) {
      const std::string b = fmt::format("encoder.layers.encoder_layer_{}.", i);
      split.specs[b + "self_attention.in_proj_weight"] = ParallelSelfAttentionImpl::in_proj_spec();
      split.specs[b + "self_attention.in_proj_bias"] = ParallelSelfAttentionImpl::in_proj_spec();
      split.specs[b + "self_attention.out_proj.weight"] = RowParallelLinearImpl::weight_spec();
      split.specs[b + "mlp.0.weight"] = {0, 1};
      split.specs[b + "mlp.0.bias"] = {0, 1};
      split.specs[b + "mlp.3.weight"] = RowParallelLinearImpl::weight_spec();
      if (sequence_parallel) {  // applied to this rank's tokens only
        for (const char* name : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias",
                                 "self_attention.out_proj.bias", "mlp.3.bias"}) {
          split.partial_grads.push_back(b + name);
        }
      }
    }
    auto block = vit->encoder->layers->ptr<models::ViTEncoderBlockImpl>(0);
    const int64_t heads = block->self_attention->options.num_heads();
    const int64_t width = block->mlp->ptr<nn::LinearImpl>(0)->options.out_features();
    split.summary =
        fmt::format("{} blocks: {} heads -> {} a rank, MLP width {} -> {}; {}", blocks, heads,
                    heads / ranks, width, width / ranks,
                    sequence_parallel ? "sequence parallel: LayerNorms, dropouts and residuals "
                                        "over 1/T of the tokens, two all-gathers and two "
                                        "reduce-scatters a block each way"
                                      : "two all-reduces a block forward, two backward");
    split.layers = parallel->layers();
    split.module = torch::nn::AnyModule(parallel);
    return split;
  }
  if (auto* mlp = module->as<models::MlpImpl>()) {
    models::Mlp holder(std::dynamic_pointer_cast<models::MlpImpl>(whole.ptr()));
    split.specs["fc1.weight"] = {0, 1};
    split.specs["fc1.bias"] = {0, 1};
    split.specs["fc2.weight"] = RowParallelLinearImpl::weight_spec();
    const int64_t width = mlp->fc1->options.out_features();
    split.summary = fmt::format(
        "fc1 {} -> {} outputs a rank, fc2 split by inputs; one all-reduce forward, one backward",
        width, width / ranks);
    ParallelMlp parallel(holder, group, checkpointing);
    split.layers = parallel->layers();
    split.module = torch::nn::AnyModule(parallel);
    return split;
  }
  throw Error(ErrorKind::kInternal, "split_model: a model without a plan passed check_splittable");
}

torch::nn::Sequential parallelize(const torch::nn::Sequential& whole,
                                  const std::map<std::string, LinearStyle>& styles,
                                  dist::Context& group, std::map<std::string, ShardSpec>* specs) {
  nn::Sequential split;
  const auto children = whole->named_children();
  size_t found = 0;
  for (size_t i = 0; i < whole->size(); ++i) {
    const std::string& name = children[i].key();
    auto style = styles.find(name);
    if (style == styles.end()) {
      split->push_back(std::string(name), any_at(whole, i));
      continue;
    }
    auto* linear = whole->ptr(i)->as<nn::LinearImpl>();
    DDPX_CHECK(linear != nullptr, ErrorKind::kUsage,
               "tensor parallel: child '{}' of the Sequential is not a Linear; only Linear "
               "children split",
               name);
    nn::Linear layer(whole->ptr<nn::LinearImpl>(i));
    ++found;
    if (style->second == LinearStyle::kColumn) {
      split->push_back(std::string(name), ColumnParallelLinear(layer, group));
      if (specs != nullptr) {
        (*specs)[name + ".weight"] = {0, 1};
        if (layer->bias.defined()) (*specs)[name + ".bias"] = {0, 1};
      }
    } else {
      split->push_back(std::string(name), RowParallelLinear(layer, group));
      if (specs != nullptr) (*specs)[name + ".weight"] = RowParallelLinearImpl::weight_spec();
    }
  }
  DDPX_CHECK(found == styles.size(), ErrorKind::kUsage,
             "tensor parallel: {} of the {} layers named to split are not children of the "
             "Sequential",
             styles.size() - found, styles.size());
  return split;
}

}  // namespace ddpx::parallel::tensor
