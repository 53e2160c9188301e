// A vocabulary split over a tensor-parallel group (Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy): rank r of T holds rows [r * V'/T, (r + 1) * V'/T) of the token
// embedding, V' the vocabulary padded to a multiple of d x T (padded_vocab(): Megatron-LM's
// --make-vocab-size-divisible-by d, ddpx's --vocab_divisible_by, 128 by default, so that each
// rank's slice of the output layer is a multiple of 128 wide); a tied output layer
// gives each rank the same slice of the logits' last dimension, and the loss, the predictions and
// the gathered logits are computed from those local slices:
// - vocab_parallel_embedding: each rank looks up the tokens it holds (zeros for the others) and
//   one all-reduce sums them (the identity backward: each rank's rows get their own gradient).
// - VocabParallelEmbedding: the module holding a rank's rows, its parameter named `weight`.
// - vocab_parallel_cross_entropy: the mean cross-entropy of the whole vocabulary's softmax from
//   the local logits: one all-gather of each token's local maximum and one all-reduce of the sum
//   of exponentials and the target's logit (taken on the rank that holds it). The whole logits are
//   never gathered; backward is local and exact (softmax minus the one-hot, on this rank's slice).
//   The padded columns never win and never count. Labels of kIgnoreIndex (-100, torch's
//   ignore_index: a masked LM's unmasked tokens) count neither in the loss nor in its mean.
// - vocab_parallel_argmax: the whole vocabulary's argmax (the first on ties, as argmax's) from
//   one all-gather of each rank's local maximum and its index.
// - gather_vocab: the whole logits (V, padding dropped), for evaluation.
// `group` must outlive the autograd graph; on a group of one all are the unsplit computations.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

inline constexpr int64_t kIgnoreIndex = -100;
inline constexpr int64_t kVocabDivisibleBy = 128;  // Megatron-LM's default

// The vocabulary padded to a multiple of `divisible_by` x `ranks` (Megatron's
// make-vocab-size-divisible-by times the tensor size).
int64_t padded_vocab(int64_t vocab, int ranks, int64_t divisible_by = 1);

// This rank's rows of a padded vocabulary's embedding (`spec`'s piece of `whole`), as `weight`.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(const torch::Tensor& whole, const ShardSpec& spec,
                             dist::Context& group);
  torch::Tensor weight;
};
TORCH_MODULE(VocabParallelEmbedding);

// idx: int64 token ids, any shape; weight: this rank's rows, from row `start` of the padded
// vocabulary -> (idx's shape, D), whole on every rank.
torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight,
                                       int64_t start, dist::Context& group);

// logits: (..., R), columns [start, start + R) of the padded vocabulary, of which those >= vocab
// are padding; labels: (...) int64 in [0, vocab) or kIgnoreIndex. The mean over every position
// not ignored, in float32, with label smoothing as torch.nn.CrossEntropyLoss(label_smoothing=s)
// over the `vocab` classes.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                           int64_t start, int64_t vocab, double label_smoothing,
                                           dist::Context& group);

// logits as above -> (...) int64: the index of the largest logit of the whole vocabulary.
torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, int64_t start, int64_t vocab,
                                    dist::Context& group);

// logits: (..., R), every rank's slice in rank order -> (..., vocab).
torch::Tensor gather_vocab(const torch::Tensor& logits, int64_t vocab, dist::Context& group);

}  // namespace ddpx::parallel::tensor
