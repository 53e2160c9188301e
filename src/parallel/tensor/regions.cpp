// Megatron's f and g (see regions.h).
#include "parallel/tensor/regions.h"

#include <torch/autograd.h>

#include "distributed/context.h"

namespace ddpx::parallel::tensor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

dist::Context& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<dist::Context*>(ctx->saved_data["group"].toInt());
}

torch::Tensor all_reduced(const torch::Tensor& t, dist::Context& group) {
  torch::Tensor sum = t.contiguous().clone();
  group.all_reduce_sum(sum);
  return sum;
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);  // a new node in the graph over the same values
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t group) {
    return all_reduced(x, *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

int64_t address(dist::Context& group) { return reinterpret_cast<int64_t>(&group); }

}  // namespace

torch::Tensor copy_to_region(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return CopyToRegion::apply(x, address(group));
}

torch::Tensor reduce_from_region(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return ReduceFromRegion::apply(x, address(group));
}

}  // namespace ddpx::parallel::tensor
