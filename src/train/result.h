// What a training run reports: one EpochResult per epoch trained and the run's totals
// (run_training() returns them; curves.h writes them out).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpx::train {

struct EpochResult {
  int64_t epoch = 0;
  double seconds = 0;
  double loss = 0;
  double accuracy = 0;
  double images_per_sec = 0;  // all ranks together (tokens for a language model)
  double data_wait_s = 0;     // rank 0's time waiting for its loader (the GPU starved)
  std::optional<double> mfu;  // model FLOP utilisation where known (epoch_meter.h), 0.41 = 41%
  std::optional<double> test_accuracy;
  std::optional<double> test_loss;
  std::optional<double> test_accuracy_ema;  // --ema_decay: the averaged weights' accuracy
  // The plan's own figures (Plan::epoch_metrics(): PowerSGD's compression), by name.
  std::vector<std::pair<std::string, double>> plan_metrics;
};

struct TrainResult {
  std::vector<EpochResult> epochs;  // the epochs this run trained (not those resumed past)
  double seconds = 0;
  std::optional<double> final_test_accuracy;
  std::optional<double> final_test_loss;
  std::optional<double> final_test_accuracy_ema;
};

}  // namespace ddpx::train
