// Optimizers by name and the learning-rate schedule. The schedule is a pure function of the
// global step, so a resumed run recomputes exactly the rate an uninterrupted run would use.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddpx::train {

struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adam | adamw
  double learning_rate = 0.05;
  double weight_decay = 0.0;
  double momentum = 0.9;  // sgd only
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters,
                                                        const OptimizerConfig& config);

// The shape of the learning rate after warmup: constant, step (x0.1 at 1/2 and 3/4 of training,
// as in the classic ImageNet recipe scaled to the run) or cosine to zero.
enum class Schedule { kConstant, kStep, kCosine };
const char* name(Schedule schedule);

// Linear warmup from ~0 to base_lr over warmup_steps, then the schedule.
class LrSchedule {
 public:
  LrSchedule(Schedule kind, double base_lr, int64_t total_steps, int64_t warmup_steps);
  double lr_at(int64_t step) const;

 private:
  Schedule kind_;
  double base_lr_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace ddpx::train
