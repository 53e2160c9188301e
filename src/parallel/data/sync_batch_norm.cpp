#include "parallel/data/sync_batch_norm.h"

#include <torch/autograd.h>

#include <cstdint>

#include "models/batch_norm.h"

namespace ddpx::parallel {
namespace {

// all_reduce(sum) whose gradient is all_reduce(sum) of the incoming gradient: the loss of every
// rank depends on every rank's contribution to the statistics.
struct AllReduceSumFunction : torch::autograd::Function<AllReduceSumFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               int64_t context_address) {
    ctx->saved_data["context"] = context_address;
    auto total = local.clone();
    reinterpret_cast<dist::Context*>(context_address)->all_reduce_sum(total);
    return total;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* context = reinterpret_cast<dist::Context*>(ctx->saved_data["context"].toInt());
    auto total = grads[0].contiguous().clone();
    context->all_reduce_sum(total);
    return {total, torch::Tensor()};
  }
};

class ContextAllReduce : public models::StatsAllReduce {
 public:
  explicit ContextAllReduce(dist::Context& context) : context_(context) {}
  torch::Tensor sum(const torch::Tensor& local) override {
    return AllReduceSumFunction::apply(local.contiguous(), reinterpret_cast<int64_t>(&context_));
  }

 private:
  dist::Context& context_;
};

}  // namespace

int convert_sync_batch_norm(torch::nn::Module& model, dist::Context& context) {
  auto all_reduce = std::make_shared<ContextAllReduce>(context);
  int converted = 0;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (auto* bn = module->as<models::BatchNormImpl>()) {
      bn->synchronize(all_reduce);
      ++converted;
    }
  }
  return converted;
}

}  // namespace ddpx::parallel
