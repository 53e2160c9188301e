// An exponential moving average of a model's weights (Polyak averaging, as timm's ModelEmaV3):
// after every optimizer step, ema = d * ema + (1 - d) * weights for every floating-point
// parameter and buffer (BatchNorm statistics too), other buffers copied. The decay warms up as
// d_t = min(decay, (1 + t) / (10 + t)), so a short run's average is not dominated by the random
// initial weights.
//
// The average is kept where the parameters are: over the tensors this rank holds
// (parallel::HeldModel::held_tensors(): the whole model for data parallel, its shards under
// --shard full, its stages under a pipeline, its pieces under tensor parallelism), so an
// update never communicates. The whole average is assembled only when something needs it
// (evaluation, a checkpoint), once after each update, through the path that assembles the
// model itself: the average is swapped into the held tensors, plan.module() is copied, and the
// weights are swapped back.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::parallel {
class HeldModel;
class Plan;
}  // namespace ddpx::parallel

namespace ddpx::train {

class ModelEma {
 public:
  // The average of `held` (a plan's held tensors, or a module's parameters then buffers),
  // starting from their current values, on their devices.
  ModelEma(const std::vector<torch::Tensor>& held, double decay);

  // After an optimizer step: `held` the same tensors, in the same order. No communication.
  void update(const std::vector<torch::Tensor>& held);
  double decay_at(int64_t updates) const;  // the warmed-up decay of update number `updates`

  // The average, one tensor per held tensor (floating point averaged, the others copied).
  const std::vector<torch::Tensor>& average() const { return average_; }
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }  // after a checkpoint load

  // Writes the whole average into `whole` (an instance of the model's architecture) through
  // plan.module(); nothing when it is already there (no update since). Collective, like
  // module().
  void assemble(parallel::HeldModel& plan, torch::nn::Module& whole);
  // The average from `whole` (a checkpoint's), cut into this rank's held tensors the way
  // plan.load_state_dict() cuts a checkpoint's model; the plan's own state is left as it was.
  // Collective; before training (at resume), like load_state_dict().
  void load(parallel::Plan& plan, torch::nn::Module& whole);

 private:
  double decay_;
  int64_t updates_ = 0;
  std::vector<torch::Tensor> average_;
  bool assembled_ = false;  // `whole` holds the current average
};

// The tensors a plan holds, without their names: what ModelEma averages.
std::vector<torch::Tensor> held_tensors(parallel::HeldModel& plan);
// A module's parameters then buffers, in registration order (its held tensors when whole).
std::vector<torch::Tensor> module_tensors(torch::nn::Module& module);

}  // namespace ddpx::train
