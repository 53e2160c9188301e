// Optimizers by name and the learning-rate schedule. The schedule is a pure function of the
// global step, so a resumed run recomputes exactly the rate an uninterrupted run would use.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::train {

// `--optimizer`: SGD with momentum, Adam, AdamW, LARS or LAMB (optim/).
enum class Optimizer { kSgd, kAdam, kAdamw, kLars, kLamb };
inline constexpr NameTable<Optimizer, 5> kOptimizerNames{{{Optimizer::kSgd, "sgd"},
                                                          {Optimizer::kAdam, "adam"},
                                                          {Optimizer::kAdamw, "adamw"},
                                                          {Optimizer::kLars, "lars"},
                                                          {Optimizer::kLamb, "lamb"}}};
inline const char* name(Optimizer optimizer) { return name_of(kOptimizerNames, optimizer); }

struct OptimizerConfig {
  Optimizer name = Optimizer::kSgd;
  double learning_rate = 0.05;
  double weight_decay = 0.0;
  double momentum = 0.9;  // sgd and lars
  // adamw: decay the matrices only (not biases and norms' scales), as GPT-2's, nanoGPT's and
  // llm.c's AdamW do; the language models' setting. Off, torch.optim.AdamW's (every parameter).
  bool decay_matrices_only = false;
  double beta1 = 0.9;  // adam, adamw, lamb
  double beta2 = 0.999;
};

// How the learning rate follows the global batch (Goyal et al. 2017's linear rule; the square
// root rule of Krizhevsky 2014 and LAMB): lr = base_lr * (global / base_batch)^p with p = 1, 1/2
// or 0.
enum class LrScale { kNone, kLinear, kSqrt };
inline constexpr NameTable<LrScale, 3> kLrScaleNames{
    {{LrScale::kNone, "none"}, {LrScale::kLinear, "linear"}, {LrScale::kSqrt, "sqrt"}}};
inline const char* name(LrScale scale) { return name_of(kLrScaleNames, scale); }
double scaled_learning_rate(double base_lr, LrScale scale, int64_t global_batch,
                            int64_t base_batch);

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters,
                                                        const OptimizerConfig& config);

// The shape of the learning rate after warmup: constant, step or cosine to zero. Step multiplies
// the rate by gamma every `every_steps` optimizer steps counted from the first (torch.optim's
// StepLR, stepped per epoch when every_steps is a whole number of epochs: the classic ImageNet
// recipe's x0.1 every 30 epochs), or, with every_steps 0, at 1/2 and 3/4 of training.
enum class Schedule { kConstant, kStep, kCosine };
inline constexpr NameTable<Schedule, 3> kScheduleNames{
    {{Schedule::kConstant, "constant"}, {Schedule::kStep, "step"}, {Schedule::kCosine, "cosine"}}};
inline const char* name(Schedule schedule) { return name_of(kScheduleNames, schedule); }

struct StepDecay {
  int64_t every_steps = 0;  // 0: at 1/2 and 3/4 of training
  double gamma = 0.1;
};

// Linear warmup from ~0 to base_lr over warmup_steps, then the schedule.
class LrSchedule {
 public:
  // Cosine decays from base_lr to min_lr (nanoGPT's, torchtitan's lr_min); the others ignore it.
  LrSchedule(Schedule kind, double base_lr, int64_t total_steps, int64_t warmup_steps,
             StepDecay step = {}, double min_lr = 0.0);
  double lr_at(int64_t step) const;

 private:
  Schedule kind_;
  double base_lr_;
  int64_t total_steps_;
  int64_t warmup_steps_;
  StepDecay step_;
  double min_lr_;
};

}  // namespace ddpx::train
