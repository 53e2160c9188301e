// Which layers of a model tensor parallelism splits, and the split model a rank runs.
//
// Plans, as Megatron-LM splits a transformer (and torchtitan's ColwiseParallel/RowwiseParallel):
// - ViT (models/vit.h: every vit_* of the zoo): in each encoder block, the attention's fused q/k/v
//   projection column-parallel and its output projection row-parallel (heads split), the MLP's
//   first linear column-parallel and its second row-parallel. The patch embedding, class token,
//   position embedding, LayerNorms and the classifier head stay whole on every rank.
// - MLP (models/mlp.h): fc1 column-parallel, fc2 row-parallel, fc3 whole.
// - The GPT family (models/gpt.h; parallel_gpt.h): each block's attention and MLP as a ViT's, the
//   token embedding and the tied output layer split over the vocabulary (vocab_parallel.h).
// - BERT (models/bert.h; parallel_bert.h): each encoder layer's query, key and value
//   column-parallel by heads and its attention output row-parallel, the intermediate dense
//   column-parallel and the output dense row-parallel; the word embedding, the tied decoder and
//   its bias split over the vocabulary, the masked-LM loss from each rank's logits.
// - A user's torch::nn::Sequential: parallelize(sequential, styles, group) splits the Linear
//   children named in `styles`; other children run whole.
// The split model shares the whole model's unsplit layers (the same tensors: their training is
// the whole model's) and holds copies of this rank's pieces of the split ones.
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/activation_checkpoint.h"
#include "models/layer_sequence.h"
#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

struct SplitModel {
  torch::nn::AnyModule module;  // what this rank runs: its forward communicates over the group
  // The split parameters by name (the split module's names are the whole model's); every other
  // parameter and buffer is whole, and shared with the whole model.
  std::map<std::string, ShardSpec> specs;
  std::string summary;  // what was split, for the start-up line: "12 heads -> 6 a rank, ..."
  // Sequence parallel: the whole parameters applied to this rank's tokens only (the blocks'
  // LayerNorms, the row-parallel biases), whose gradients are summed over the group after
  // backward.
  std::vector<std::string> partial_grads;
  // The split model as a sequence of layers (models/layer_sequence.h), the unsplit model's cut
  // for cut, so a pipeline can run it in stages (--pipeline_parallel x --tensor_parallel): a
  // ViT's embedding, each split block, its head; the MLP's fc1, fc2, fc3; a GPT's embeddings,
  // each split block, its final LayerNorm with the tied vocabulary-parallel output layer; BERT's
  // embeddings, each split encoder layer, its MLM head with the tied decoder (the embedding's
  // rows listed in the first and the last layer: split_layers.h). Each layer runs its
  // own activation checkpointing (the recomputed ViT blocks replay their attention dropout), so
  // a pipeline over them checkpoints nothing more. With sequence parallelism the layers between
  // the embedding and the head pass this rank's share of the tokens (B, count, D), the sequence
  // being split_model()'s `sample_shape`'s.
  std::vector<models::Layer> layers;
  // A vocabulary-parallel output (the GPT family, BERT): the module's output is this rank's slice
  // of the logits' last dimension (vocab_parallel.h), never the whole logits. `loss` is the mean
  // cross-entropy from it and the labels (with label smoothing; labels of -100, a masked LM's
  // unmasked tokens, do not count), `predict` the whole
  // vocabulary's argmax, `gather` the whole logits; each is collective over the group. Null for
  // the models whose every rank computes the whole output.
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& labels,
                              double label_smoothing)>
      loss;
  std::function<torch::Tensor(const torch::Tensor&output)> predict, gather;
};

// Throws ddpx::Error(kUsage), before any collective, for a model without a plan (naming the ones
// with) or a size that does not split (heads, MLP width): `ranks` is the group's size.
// `sequence_parallel` (regions.h) is for the ViTs and the language models.
void check_splittable(const torch::nn::AnyModule& whole, int ranks, const std::string& model_name,
                      bool sequence_parallel = false,
                      const models::ActivationCheckpointing& checkpointing = {});

// The split model of this rank of `group` (which must outlive it). Not collective: every rank's
// whole model must hold the same weights. `checkpointing` (--activation_checkpointing) recomputes
// the chosen layers of the model's layer sequence in backward (models/activation_checkpoint.h):
// a ViT's encoder blocks, the MLP's middle layer; a recomputed ViT block replays its attention
// dropout's generator too, so its masks are the first forward's. The recompute runs the block's
// collectives again, in backward, in the same order on every rank (a GPT's blocks and BERT's
// encoder layers too).
// `sample_shape` (C, H, W): the images the layer sequence will see, for a sequence-parallel ViT's
// token count (empty: the model's own image size). `vocab_divisible_by`: a language model's
// vocabulary is padded to a multiple of it times the group's size (vocab_parallel.h).
SplitModel split_model(const torch::nn::AnyModule& whole, dist::Context& group,
                       bool sequence_parallel = false,
                       const models::ActivationCheckpointing& checkpointing = {},
                       const std::vector<int64_t>& sample_shape = {},
                       int64_t vocab_divisible_by = 1);

enum class LinearStyle { kColumn, kRow };

// A user's Sequential with the Linear children named in `styles` ("0", "2", or the names given
// at construction) replaced by their column- or row-parallel pieces; `specs` receives the split
// parameters' names ("0.weight"). Throws kUsage for a name that is not a Linear child.
torch::nn::Sequential parallelize(const torch::nn::Sequential& whole,
                                  const std::map<std::string, LinearStyle>& styles,
                                  dist::Context& group,
                                  std::map<std::string, ShardSpec>* specs = nullptr);

}  // namespace ddpx::parallel::tensor
