// How a tensor-parallel rank holds its piece of a whole parameter, and the way back.
//
// A parameter split across the T ranks of a tensor-parallel group is cut along one dimension
// (`dim`: 0, a column-parallel layer's output rows; 1, a row-parallel layer's input columns). A
// fused projection of `parts` equal blocks along that dimension (attention's in_proj: q, k, v)
// is cut block by block, so that rank r holds rows r of q, of k and of v (its heads), as
// Megatron-LM splits a fused QKV. A replicated parameter (LayerNorm, embeddings, a classifier
// head, a row-parallel layer's bias) has no spec: every rank holds it whole. A vocabulary that
// T does not divide (a GPT's token embedding) is padded with `pad` rows of zeros at the end
// before it is cut, as Megatron-LM pads it, and the join drops them again: the whole tensor
// never holds the padding.
#pragma once

#include <torch/types.h>

#include <vector>

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

struct ShardSpec {
  int64_t dim = 0;
  int64_t parts = 1;
  int64_t pad = 0;  // zeros appended along dim before the cut (with parts 1 only)
};

// Rank `rank`'s piece of `whole` among `ranks` (a copy, contiguous). The size along spec.dim, with
// spec.pad, must divide by parts * ranks.
torch::Tensor take_shard(const torch::Tensor& whole, const ShardSpec& spec, int rank, int ranks);

// The whole tensor from every rank's piece, in rank order (the inverse of take_shard).
torch::Tensor join_shards(const std::vector<torch::Tensor>& pieces, const ShardSpec& spec);

// Collective over `group`: every rank's piece gathered and joined into the whole, on every rank.
torch::Tensor gather_whole(const torch::Tensor& piece, const ShardSpec& spec, dist::Context& group);

}  // namespace ddpx::parallel::tensor
