// The run's numbers beside the seed's lines, written by rank 0: JSON lines (--metrics_json, one
// object per epoch) and TensorBoard event files (--tensorboard DIR: per-step loss, accuracy,
// learning rate, images/s, step time and GPU memory; per-epoch train and test figures and the
// plan's own, such as PowerSGD's compression, under plan/).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "train/metrics.h"
#include "train/result.h"

namespace ddpx {
class TensorBoardWriter;
}

namespace ddpx::train {

struct StepPoint {
  int64_t step = 0;  // global optimizer step
  double loss = 0, accuracy = 0;
  double learning_rate = 0;
  double images_per_sec = 0;  // all ranks together
  double step_time_s = 0;     // mean over the steps since the last point
  std::optional<double> gpu_memory_gib;
};

class Curves {
 public:
  // Opens the outputs on rank 0 (the other ranks write nothing); throws kUsage naming the flag
  // when a file or directory cannot be written.
  Curves(const std::string& metrics_json, const std::string& tensorboard_dir, int rank,
         int world_size);
  ~Curves();

  void step(const StepPoint& point);
  void epoch(const EpochResult& result, int64_t global_step);

 private:
  std::string metrics_json_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  int world_size_;
  bool writer_;  // rank 0
};

// The point for the steps since the previous one (`before`): `seconds` and `steps` long,
// ending at `global_step` at learning rate `lr`; `now` and `before` are the sums of one rank of
// a replica, and the throughput is `replicas` times its own.
StepPoint interval_point(const MetricSums& now, const MetricSums& before, double seconds,
                         int64_t steps, int64_t global_step, double lr, int replicas,
                         const torch::Device& device);

// GiB held by tensors on a GPU right now (none on a CPU).
std::optional<double> gpu_memory_gib(const torch::Device& device);

}  // namespace ddpx::train
