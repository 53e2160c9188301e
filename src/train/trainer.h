// The training run behind `ddpx train`: join the job, load data, build the model, hand it to
// the parallel plan (parallel/plan.h), train for num_epochs, evaluate, checkpoint. Rank 0 prints
// the seed's lines:
//   Epoch - 0/2: time - 41.20s || loss_train - 0.5123 || accuracy_train - 0.8123 || ...
//   Accuracy on test dataset - 0.8912
//   Accuracy on test dataset (EMA) - 0.8950        (with --ema_decay)
//   Training took 83.51s for 2 epochs
#pragma once

#include <cstdint>
#include <functional>

#include "train/options.h"
#include "train/result.h"

namespace ddpx::dist {
class Context;
}
namespace ddpx::parallel {
class Plan;
}

namespace ddpx::train {

// Called after every optimizer step with the steps taken so far in this run, on every rank; true
// ends the run there, as a snapshot's stop does. `bench train` times a window of ddpx train's own
// loop with it, and asks the plan what it has to say about the window (collective).
using StepHook =
    std::function<bool(int64_t global_step, dist::Context& context, parallel::Plan& plan)>;

TrainResult run_training(const TrainOptions& options, const StepHook& after_step = {});

}  // namespace ddpx::train
