// The pipeline plan's update (see pipeline_plan.h): the gradients, averaged over each stage's
// replicas during backward, clipped by the whole model's norm, and this rank's stages stepped.
#include <torch/optim/optimizer.h>

#include "distributed/context.h"
#include "optim/clip_grad.h"
#include "optim/fused_step.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

torch::Tensor PipelinePlan::clip_grad_norm(double max_norm) {
  std::vector<optim::HeldGradient> grads;
  const auto& held = sharded() ? shards_ : params_;
  for (size_t i = 0; i < held.size(); ++i) {
    if (!held[i].grad().defined()) continue;
    // A tied gradient's copies each count a share (an exact half for two): every copy is scaled.
    grads.push_back({held[i].grad(), counted_[i] ? 1 : static_cast<int>(tied_ranks_.size())});
  }
  // The stages split the model. Whole, every replica holds the same averaged gradients: each
  // stage's squares count once a replica. Sharded, the replicas' shards split each stage
  // (padding is zero): every element counts once. A tied parameter's copies count once
  // together.
  optim::NormSum sum;
  sum.all_reduce_sum = [this](torch::Tensor& t) { context_.all_reduce_sum(t); };
  sum.replicas = sharded() ? 1 : replica_count_;
  return optim::clip_by_global_norm(grads, sum, max_norm);
}

void PipelinePlan::step() {
  // Fused SGD or AdamW where they cover the stages' parameters, as the other plans step.
  if (optimizer_) optim::fused_step(*optimizer_, !params_.empty() && !params_[0].device().is_cpu());
  whole_ = false;
  for (auto& unit : units_) unit.mark_stale();  // gathered before the next forward
}

void PipelinePlan::zero_grad() {
  if (optimizer_) optimizer_->zero_grad();
  if (sharded()) {
    for (auto& p : params_) p.mutable_grad() = torch::Tensor();  // ZeRO-1's whole gradients
  }
}

std::vector<torch::Tensor> PipelinePlan::parameters() { return sharded() ? shards_ : params_; }

torch::Device PipelinePlan::device() {
  // Freed tensors keep their device (storage.h).
  const auto params = model_.ptr()->parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace ddpx::parallel
