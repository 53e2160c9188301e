// What an epoch of `ddpx train` reports while it runs: the running loss and accuracy (kept on
// the device, read every step on a CPU and every kGpuReadEvery steps on a GPU), the progress
// bar, TensorBoard step points, the stop on a non-finite loss, and the seed's epoch line at the
// end, from sums reduced over all ranks.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "core/timer.h"
#include "distributed/context.h"
#include "train/curves.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/progress.h"
#include "train/result.h"
#include "train/task.h"

namespace ddpx::train {

// On a GPU the metrics are read (a host synchronization) every this many steps and at the end
// of an epoch; on a CPU every step. TensorBoard points every kCpuCurveEvery steps on a CPU (on a
// GPU at every read).
inline constexpr int64_t kGpuReadEvery = 50;
inline constexpr int64_t kCpuCurveEvery = 10;

// Model FLOP utilisation: the training FLOPs of one counted unit (a token) and a device's peak
// FLOP/s. Known for a GPT on a GPU of the peak table (distributed/peak_flops.h), where the epoch
// line ends with `|| mfu - P%`; zero elsewhere (a CPU has no published peak).
struct Utilization {
  double flops_per_unit = 0;
  double peak_flops = 0;  // a rank's device
  bool known() const { return flops_per_unit > 0 && peak_flops > 0; }
};

// How the inputs a rank counts scale to the job's throughput: `replicas` data-parallel replicas
// read batches of their own, and each batch is counted on `copies` ranks of its replica (its
// tensor-parallel ranks, which all hold the loss; a pipeline counts on its first stage's).
struct Counting {
  int replicas = 1;
  int copies = 1;
};

class EpochMeter {
 public:
  EpochMeter(const TrainOptions& options, const Task& task, dist::Context& context, Curves& curves,
             int64_t steps_per_epoch, bool loss_scaling, Counting counting,
             Utilization utilization = {});

  // A micro-batch's mean loss, output and labels (on the device). With mixup the accuracy
  // counts the prediction of each image's own (dominant) label.
  void add(const torch::Tensor& loss, const torch::Tensor& output, const torch::Tensor& labels);
  // After micro-batch `step` (1-based within the epoch) of `epoch`; `lr_before` is the rate of
  // the step before global_step.
  void after(int64_t epoch, int64_t step, int64_t global_step, double lr_before);
  // The epoch's result (collective: the sums are reduced over all ranks), its line printed.
  EpochResult finish(int64_t epoch, double data_wait_s, int64_t skipped_steps, double scale);
  EpochResult stop() {  // the epoch ends early (a snapshot's stop): an empty result
    bar_.finish();
    return {};
  }

 private:
  const TrainOptions& o_;
  const Task& task_;
  dist::Context& context_;
  Curves& curves_;
  int64_t steps_per_epoch_;
  bool loss_scaling_;
  Counting counting_;
  Utilization utilization_;
  ProgressBar bar_;
  DeviceSums device_sums_;
  MetricSums sums_, at_last_point_;
  Stopwatch watch_;
  double last_point_s_ = 0;
  int64_t read_every_, curve_every_;
};

}  // namespace ddpx::train
