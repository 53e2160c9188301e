#include "optim/learning_rate.h"

namespace ddpx::optim {

void apply_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  if (lr < 0) return;
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace ddpx::optim
