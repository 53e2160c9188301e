// A split language model (the GPT family, BERT) as the layer sequence a pipeline cuts
// (models/layer_sequence.h), layer for layer the unsplit model's: the embeddings, each block, the
// head with the output layer tied to the vocabulary-parallel embedding. The tied rows are listed
// in both the first and the last layer: a pipeline keeps a copy on each of their stages and sums
// the copies' gradients (pipeline_plan.h); on the ranks of one tensor rank those are the copies of
// one slice of the vocabulary. Sequence parallel, the stages between the embedding and the head
// pass this rank's share of the tokens on (B, T/T', C): a later stage, which never sees the ids,
// takes the sequence's length from its share's.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/layer_sequence.h"

namespace ddpx::parallel::tensor {

struct SplitLanguageModel {
  // ids (B, T) -> the first block's input: (B, T, C), or this rank's share of the tokens.
  std::function<torch::Tensor(const torch::Tensor&)> embed;
  // Block i of x, `tokens` > 0: x is this rank's share of a sequence of that many (each block
  // runs its own activation checkpointing).
  std::function<torch::Tensor(size_t, const torch::Tensor&, int64_t)> block;
  // The last block's output -> this rank's slice of the logits (B, T, V'/T).
  std::function<torch::Tensor(const torch::Tensor&, int64_t)> head;
  std::vector<std::shared_ptr<torch::nn::Module>> embed_modules, blocks, head_modules;
  std::vector<std::string> block_names;
  torch::Tensor tied;  // this rank's rows of the embedding, also the output layer's weight
  std::vector<torch::Tensor> head_extra;  // the head's own split tensors (BERT's decoder bias)
  int64_t sequence_ranks = 0;             // T under --sequence_parallel, else 0
};

std::vector<models::Layer> split_layers(const SplitLanguageModel& model);

}  // namespace ddpx::parallel::tensor
