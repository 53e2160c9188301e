#include "train/optim.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>

#include "core/error.h"
#include "optim/lamb.h"
#include "optim/lars.h"

namespace ddpx::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters,
                                                        const OptimizerConfig& c) {
  if (c.name == Optimizer::kSgd) {
    return std::make_unique<torch::optim::SGD>(std::move(parameters),
                                               torch::optim::SGDOptions(c.learning_rate)
                                                   .momentum(c.momentum)
                                                   .weight_decay(c.weight_decay));
  }
  if (c.name == Optimizer::kAdam) {
    return std::make_unique<torch::optim::Adam>(std::move(parameters),
                                                torch::optim::AdamOptions(c.learning_rate)
                                                    .weight_decay(c.weight_decay)
                                                    .betas(std::make_tuple(c.beta1, c.beta2)));
  }
  if (c.name == Optimizer::kAdamw) {
    auto options = [&](double decay) {
      return torch::optim::AdamWOptions(c.learning_rate)
          .weight_decay(decay)
          .betas(std::make_tuple(c.beta1, c.beta2));
    };
    if (!c.decay_matrices_only) {
      return std::make_unique<torch::optim::AdamW>(std::move(parameters), options(c.weight_decay));
    }
    // Decoupled weight decay on the matrices only (weights of Linear, Embedding), not on biases
    // and norms' scales. A sharded plan's shards keep their parameter's rank
    // (parallel/sharded/shard_layout.h), so a shard falls in its parameter's group.
    std::vector<torch::Tensor> matrices, vectors;
    for (auto& p : parameters) (p.dim() >= 2 ? matrices : vectors).push_back(p);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    auto group_options = [&](double decay) {
      return std::make_unique<torch::optim::AdamWOptions>(options(decay));
    };
    if (!matrices.empty()) groups.emplace_back(std::move(matrices), group_options(c.weight_decay));
    if (!vectors.empty()) groups.emplace_back(std::move(vectors), group_options(0.0));
    return std::make_unique<torch::optim::AdamW>(std::move(groups), options(c.weight_decay));
  }
  if (c.name == Optimizer::kLars) {
    return std::make_unique<optim::Lars>(
        std::move(parameters),
        optim::LarsOptions(c.learning_rate).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  if (c.name == Optimizer::kLamb) {
    return std::make_unique<optim::Lamb>(std::move(parameters),
                                         optim::LambOptions(c.learning_rate)
                                             .weight_decay(c.weight_decay)
                                             .betas(std::make_tuple(c.beta1, c.beta2)));
  }
  fail(ErrorKind::kInternal, "optimizer {} has no factory", static_cast<int>(c.name));
}

double scaled_learning_rate(double base_lr, LrScale scale, int64_t global_batch,
                            int64_t base_batch) {
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(base_batch);
  switch (scale) {
    case LrScale::kLinear:
      return base_lr * ratio;
    case LrScale::kSqrt:
      return base_lr * std::sqrt(ratio);
    case LrScale::kNone:
      break;
  }
  return base_lr;
}

LrSchedule::LrSchedule(Schedule kind, double base_lr, int64_t total_steps, int64_t warmup_steps,
                       StepDecay step, double min_lr)
    : kind_(kind),
      base_lr_(base_lr),
      total_steps_(std::max<int64_t>(total_steps, 1)),
      warmup_steps_(std::max<int64_t>(warmup_steps, 0)),
      step_(step),
      min_lr_(min_lr) {}

double LrSchedule::lr_at(int64_t step) const {
  if (step < warmup_steps_) return base_lr_ * static_cast<double>(step + 1) / warmup_steps_;
  if (kind_ == Schedule::kConstant) return base_lr_;
  if (kind_ == Schedule::kStep && step_.every_steps > 0)
    return base_lr_ * std::pow(step_.gamma, static_cast<double>(step / step_.every_steps));
  double progress = static_cast<double>(step - warmup_steps_) /
                    std::max<int64_t>(total_steps_ - warmup_steps_, 1);
  progress = std::min(std::max(progress, 0.0), 1.0);
  if (kind_ == Schedule::kStep) {
    if (progress >= 0.75) return base_lr_ * step_.gamma * step_.gamma;
    if (progress >= 0.5) return base_lr_ * step_.gamma;
    return base_lr_;
  }
  // cosine
  return min_lr_ + 0.5 * (base_lr_ - min_lr_) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ddpx::train
