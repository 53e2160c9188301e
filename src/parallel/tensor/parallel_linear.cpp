// Column- and row-parallel linear layers (see parallel_linear.h).
#include "parallel/tensor/parallel_linear.h"

#include <torch/nn/functional/linear.h>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/tensor/regions.h"

namespace ddpx::parallel::tensor {
namespace {

void check_divides(int64_t size, int64_t by, const char* what) {
  DDPX_CHECK(size % by == 0, ErrorKind::kUsage,
             "tensor parallel: {} of {} does not split over {} pieces; pick a --tensor_parallel "
             "that divides it",
             what, size, by);
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::nn::Linear& whole,
                                                   dist::Context& group, int64_t parts)
    : group_(group), parts_(parts) {
  check_divides(whole->weight.size(0), parts * group.world_size(), "a layer's output features");
  torch::NoGradGuard no_grad;
  const int rank = group.rank(), ranks = group.world_size();
  weight = register_parameter("weight", take_shard(whole->weight, spec(), rank, ranks));
  if (whole->bias.defined()) {
    bias = register_parameter("bias", take_shard(whole->bias, spec(), rank, ranks));
  }
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in_features, int64_t out_features,
                                                   dist::Context& group, bool bias)
    : ColumnParallelLinearImpl(
          torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias)),
          group) {}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  return forward_local(copy_to_region(x, group_));
}

torch::Tensor ColumnParallelLinearImpl::forward_local(const torch::Tensor& x) {
  return torch::nn::functional::linear(x, weight, bias);
}

torch::Tensor ColumnParallelLinearImpl::forward_gathered(const torch::Tensor& x, int64_t tokens) {
  return gather_tokens_linear(x, tokens, weight, bias, group_);
}

RowParallelLinearImpl::RowParallelLinearImpl(const torch::nn::Linear& whole, dist::Context& group)
    : group_(group) {
  check_divides(whole->weight.size(1), group.world_size(), "a layer's input features");
  torch::NoGradGuard no_grad;
  weight = register_parameter(
      "weight", take_shard(whole->weight, weight_spec(), group.rank(), group.world_size()));
  // The bias is whole on every rank: the whole layer's own tensor, trained in place.
  if (whole->bias.defined()) bias = register_parameter("bias", whole->bias);
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in_features, int64_t out_features,
                                             dist::Context& group, bool bias)
    : RowParallelLinearImpl(
          torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias)),
          group) {}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = reduce_from_region(forward_partial(x), group_);
  return bias.defined() ? y + bias : y;
}

torch::Tensor RowParallelLinearImpl::forward_partial(const torch::Tensor& x) {
  return torch::nn::functional::linear(x, weight);
}

}  // namespace ddpx::parallel::tensor
