// Which parallel plan a run uses (see plan_choice.h).
#include "train/plan_choice.h"

#include "parallel/data/data_parallel_plan.h"

namespace ddpx::train {

ChosenPlan choose_plan(const TrainOptions& o, dist::Context& context, torch::nn::AnyModule model,
                       const parallel::OptimizerFactory& make_optimizer, bool loss_scaling) {
  parallel::DataParallelOptions dp;
  dp.ddp.broadcast_buffers = o.broadcast_buffers;
  dp.ddp.find_unused_parameters = o.find_unused_parameters;
  dp.ddp.comm_hook = o.comm_hook;
  dp.step.inside_backward = !loss_scaling && o.clip_grad_norm == 0;
  dp.step.split = o.clip_grad_norm == 0;
  dp.sync_bn = o.sync_bn;
  dp.model_name = o.model;
  auto plan =
      std::make_unique<parallel::DataParallelPlan>(std::move(model), context, make_optimizer, dp);
  ChosenPlan chosen;
  chosen.sync_bn_layers = plan->sync_bn_layers();
  chosen.plan = std::move(plan);
  return chosen;
}

}  // namespace ddpx::train
