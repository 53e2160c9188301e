// The communication of tensor parallelism (Megatron-LM's "f" and "g"), as autograd functions over
// a tensor-parallel group (a dist::Context of the T ranks that split one layer):
// - copy_to_region (f): the identity forward, an all-reduce of the gradient backward. It marks
//   where a replicated activation enters a split region (before a column-parallel layer): each
//   rank's backward only holds its share of the input's gradient.
// - reduce_from_region (g): an all-reduce forward, the identity backward. It ends a split region
//   (after a row-parallel layer): each rank's output is a partial sum.
// A transformer block has one of each around its attention and one around its MLP: two
// all-reduces forward, two backward. On a group of one both are the identity.
#pragma once

#include <torch/types.h>

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel::tensor {

// `group` must outlive the autograd graph the result is part of.
torch::Tensor copy_to_region(const torch::Tensor& x, dist::Context& group);
torch::Tensor reduce_from_region(const torch::Tensor& x, dist::Context& group);

}  // namespace ddpx::parallel::tensor
