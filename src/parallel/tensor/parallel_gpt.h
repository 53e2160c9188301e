// The tensor-parallel plan of the GPT family (models/gpt.h), as Megatron-LM splits GPT-2: in each
// block the attention's fused q/k/v projection (c_attn) column-parallel by heads and its output
// projection (c_proj) row-parallel, causal attention through scaled_dot_product_attention on this
// rank's heads; the MLP's c_fc column-parallel and c_proj row-parallel; the LayerNorms, the
// position embedding and the dropouts of the replicated activations whole (their masks drawn in
// step on every tensor rank from the default generator; attention dropout from a generator of
// the tensor region's own, seeded by the seed and the tensor rank, as ParallelSelfAttention's).
// The token embedding and the tied output layer split over the vocabulary (vocab_parallel.h):
// the vocabulary padded to a multiple of d x T (--vocab_divisible_by d), each rank's forward
// gives its slice of the logits, and the loss, the predictions and evaluation's logits are
// computed from it (SplitModel's loss, predict and gather). Two all-reduces a block forward and
// two backward, as the ViTs', one for the embedding forward and one for the output layer's input
// backward, and the loss's all-gather and all-reduce of one value a token.
//
// Sequence parallel (regions.h, as the ViTs'): after the embedding each rank keeps its 1/T of the
// tokens through the LayerNorms, dropouts and residuals; the q/k/v and c_fc projections gather
// the sequence (gather_tokens_linear: every rank's heads see every token, so the causal mask is
// the whole sequence's), the c_proj outputs are reduce-scattered back to the shares, and the
// output layer gathers the final LayerNorm's shares. The sequence must divide by T. The
// LayerNorms' and row-parallel biases' gradients are partial (SplitModel::partial_grads).
// Activation checkpointing recomputes the chosen blocks in backward, their collectives again in
// the same order and the attention dropout's masks replayed (region_generator.h).
#pragma once

#include <string>

#include "parallel/tensor/parallelize.h"

namespace ddpx::parallel::tensor {

// Throws ddpx::Error(kUsage) naming --tensor_parallel when the heads do not split over `ranks`.
// (A sequence that --sequence_parallel cannot split is refused with the options, train/options.h,
// and again by the forward.)
void check_gpt_splittable(const torch::nn::AnyModule& whole, int ranks,
                          const std::string& model_name, bool sequence_parallel,
                          const models::ActivationCheckpointing& checkpointing);

// The split GPT of this rank of `group` (see split_model()); `whole` holds a models::Gpt.
SplitModel split_gpt(const torch::nn::AnyModule& whole, dist::Context& group,
                     bool sequence_parallel, const models::ActivationCheckpointing& checkpointing,
                     int64_t vocab_divisible_by);

}  // namespace ddpx::parallel::tensor
