// The learning rate a step's update uses, written into every parameter group of the optimizer:
// the one place it reaches an optimizer, from the batch that carries it (parallel/plan.h's
// MicroBatch::learning_rate) or the trainer's schedule.
#pragma once

#include <torch/optim/optimizer.h>

namespace ddpx::optim {

// `lr` < 0: the optimizer keeps the rate it has (a batch that carries none).
void apply_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace ddpx::optim
