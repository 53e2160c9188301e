// The tensor-parallel plan of BERT (models/bert.h), as Megatron-LM splits its BERT: in each
// encoder layer the query, key and value projections column-parallel by heads (one fused product
// of the three, one all-reduce of its input's gradient), attention on this rank's heads, the
// attention output dense row-parallel; the intermediate dense column-parallel and the output dense
// row-parallel; the LayerNorms, residuals and dropouts whole on every rank (attention dropout
// from the tensor region's generator, region_generator.h). The word embedding and the tied
// decoder split over the vocabulary with the decoder's bias (vocab_parallel.h; the vocabulary
// padded to a multiple of d x T, --vocab_divisible_by d): each rank's forward gives its slice of
// the logits, and the masked-LM loss (only the masked positions count: labels of -100 do not),
// the predictions and evaluation's logits are computed from it. The head's transform (dense,
// GELU, LayerNorm) runs whole. Two all-reduces a layer forward and two backward.
//
// Sequence parallel (regions.h): after the embeddings each rank keeps its 1/T of the tokens
// through the post-norm LayerNorms, dropouts, residuals and the head's transform; the q/k/v and
// intermediate projections gather the sequence (attention sees every token), the row-parallel
// outputs are reduce-scattered, and the decoder gathers the transform's shares. Their
// parameters' gradients are partial (SplitModel::partial_grads). The sequence must divide by T.
//
// Activation checkpointing recomputes the chosen encoder layers in backward, their collectives
// again in the same order and the attention dropout's masks replayed (region_generator.h). A
// pipeline cuts the split BERT as the unsplit one (split_layers.h): the embeddings on the first
// stage, the encoder layers by blocks, the head and its tied decoder (this rank's rows of the
// word embedding, summed with the first stage's copy) and bias on the last.
//
// Parameter names are the whole BERT's (BertForMaskedLM's), so a checkpoint and an export are
// the unsplit model's.
#pragma once

#include <string>

#include "parallel/tensor/parallelize.h"

namespace ddpx::parallel::tensor {

// Throws ddpx::Error(kUsage) naming --tensor_parallel when the heads or the intermediate width do
// not split over `ranks`.
void check_bert_splittable(const torch::nn::AnyModule& whole, int ranks,
                           const std::string& model_name);

// The split BERT of this rank of `group` (see split_model()); `whole` holds a models::Bert.
SplitModel split_bert(const torch::nn::AnyModule& whole, dist::Context& group,
                      bool sequence_parallel, const models::ActivationCheckpointing& checkpointing,
                      int64_t vocab_divisible_by);

}  // namespace ddpx::parallel::tensor
