// The training run behind `ddpx train`: join the job, load data, build the model, wrap it in
// DistributedDataParallel when there is more than one rank, train for num_epochs, evaluate,
// checkpoint. Rank 0 prints the seed's lines:
//   Epoch - 0/2: time - 41.20s || loss_train - 0.5123 || accuracy_train - 0.8123 || ...
//   Accuracy on test dataset - 0.8912
//   Accuracy on test dataset (EMA) - 0.8950        (with --ema_decay)
//   Training took 83.51s for 2 epochs
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "train/options.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::train {

struct EpochResult {
  int64_t epoch = 0;
  double seconds = 0;
  double loss = 0;
  double accuracy = 0;
  double images_per_sec = 0;  // all ranks together
  double data_wait_s = 0;     // rank 0's time waiting for its loader (the GPU starved)
  std::optional<double> test_accuracy;
  std::optional<double> test_accuracy_ema;  // --ema_decay: the averaged weights' accuracy
};

struct TrainResult {
  std::vector<EpochResult> epochs;  // the epochs this run trained (not those resumed past)
  double seconds = 0;
  std::optional<double> final_test_accuracy;
  std::optional<double> final_test_accuracy_ema;
};

// Called after every optimizer step with the steps taken so far in this run; true ends the run
// there, as a snapshot's stop does. `bench train` times a window of ddpx train's own loop with it.
using StepHook = std::function<bool(int64_t global_step, dist::Context& context)>;

TrainResult run_training(const TrainOptions& options, const StepHook& after_step = {});

}  // namespace ddpx::train
