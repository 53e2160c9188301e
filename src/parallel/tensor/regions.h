// The communication of tensor parallelism (Megatron-LM's "f" and "g"), as autograd functions over
// a tensor-parallel group (a dist::Context of the T ranks that split one layer):
// - copy_to_region (f): the identity forward, an all-reduce of the gradient backward. It marks
//   where a replicated activation enters a split region (before a column-parallel layer): each
//   rank's backward only holds its share of the input's gradient.
// - reduce_from_region (g): an all-reduce forward, the identity backward. It ends a split region
//   (after a row-parallel layer): each rank's output is a partial sum.
// A transformer block has one of each around its attention and one around its MLP: two
// all-reduces forward, two backward. On a group of one both are the identity.
//
// Sequence parallelism (Megatron-LM's, Korthikanti et al. 2022) keeps the activations between
// the split layers (LayerNorm, dropout, the residual) cut over tokens, dimension 1 of (B, S, D):
// rank r holds a balanced share, tokens [start, start + count). f becomes gather_tokens (an
// all-gather forward, a reduce-scatter backward) and g becomes reduce_scatter_tokens (a
// reduce-scatter forward, an all-gather backward): the same bytes as the all-reduces they replace,
// and each rank's LayerNorm and dropout activations are 1/T of the sequence. split_tokens and
// whole_tokens enter and leave the region from whole activations. A sequence that T does not
// divide is padded inside the collectives only. gather_tokens_linear fuses f with the
// column-parallel layer after it so that the gathered input is not kept for backward (one more
// all-gather in backward, in exchange for 1/T of that activation).
#pragma once

#include <torch/types.h>

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

// `group` must outlive the autograd graph the result is part of.
torch::Tensor copy_to_region(const torch::Tensor& x, dist::Context& group);
torch::Tensor reduce_from_region(const torch::Tensor& x, dist::Context& group);

struct TokenShard {
  int64_t start = 0, count = 0;
};
// Rank `rank`'s share of `tokens` among `ranks`: the first tokens % ranks ranks one more.
TokenShard token_shard(int64_t tokens, int rank, int ranks);

// x: (B, S, D) whole -> (B, count, D) this rank's; backward: the gradients all-gathered.
torch::Tensor split_tokens(const torch::Tensor& x, dist::Context& group);
// x: (B, count, D) -> (B, tokens, D); backward: the gradients reduce-scattered to each share.
torch::Tensor gather_tokens(const torch::Tensor& x, int64_t tokens, dist::Context& group);
// x: (B, S, D) partial sums -> (B, count, D) this rank's share of their sum; backward: the
// gradients all-gathered.
torch::Tensor reduce_scatter_tokens(const torch::Tensor& x, dist::Context& group);
// x: (B, count, D) -> (B, tokens, D) whole, for layers that run whole on every rank; backward:
// this rank's share of the (identical) gradients.
torch::Tensor whole_tokens(const torch::Tensor& x, int64_t tokens, dist::Context& group);

// gather_tokens(x) followed by the column-parallel linear (weight: this rank's rows, bias: this
// rank's or undefined), as one autograd node that keeps only x, this rank's share, for backward
// and gathers it again there (Megatron-LM's sequence parallelism): the whole sequence is never
// held between forward and backward. Backward: an all-gather of x, then the reduce-scatter of
// its gradient. x: (B, count, D) -> (B, tokens, rows of weight).
torch::Tensor gather_tokens_linear(const torch::Tensor& x, int64_t tokens,
                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                   dist::Context& group);

}  // namespace ddpx::parallel::tensor
