// Steady-state training throughput: images/s for a model, batch, world size and data source,
// with each step's time split into data wait, forward+backward, communication not hidden by
// backward, and the optimizer step. Run under `ddpx run N -- bench train` for N workers.
//
// "Communication not hidden" is measured, not inferred from reducer internals: the benchmark
// alternates blocks of synchronised steps with blocks of no_sync() steps (identical compute,
// no communication) and reports the difference in forward+backward time.
//
// On a GPU (--device cuda, with --amp and --channels_last as `ddpx train`) each phase ends with
// a device synchronization so that its time is the GPU's; it also reports the peak memory the
// allocator held and the model FLOPs utilisation: 3 x the forward FLOPs per image (counted,
// models/flops.h) x images/s per rank over the GPU's published peak for the compute dtype
// (bench/peaks.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dist/choices.h"
#include "train/amp.h"

namespace ddpx::bench {

struct TrainBenchOptions {
  std::string model = "resnet18";
  std::string stem = "imagenet";
  std::string data = "synthetic";  // synthetic | fashion-mnist | mnist | cifar10 | cifar100
  std::string data_dir;
  int64_t image_size = 32;
  int64_t num_classes = 10;  // synthetic only; datasets bring their own
  int64_t batch_size = 64;   // per rank
  int64_t steps = 30;        // measured steps (half synced, half no_sync when distributed)
  int64_t warmup = 5;
  int threads = 0;         // 0: default_threads() (train/threads.h)
  bool augment = true;     // random crop (padding 4) + flip, as in the workload
  int64_t bucket_mb = 25;  // DDP bucket cap
  int64_t first_bucket_mb = 1;
  dist::CommHook comm_hook = dist::CommHook::kAllreduce;
  dist::Transport transport = dist::Transport::kAuto;
  bool fused_step = true;  // false: torch::optim::SGD::step, no split (--optimizer_step libtorch)
  std::string json;        // append a JSON line with the figures (rank 0)
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;
  train::Amp amp = train::Amp::kOff;
  bool channels_last = false;
};

struct TrainBenchResult {
  double images_per_sec = 0;       // all ranks, synchronised steps
  double data_wait_ms = 0;         // per step
  double forward_backward_ms = 0;  // per synchronised step, including exposed communication
  double exposed_comm_ms = 0;      // synced forward+backward minus no_sync forward+backward
  double optimizer_ms = 0;
  double step_ms = 0;
  double startup_s = 0;       // job start (launcher or process) to the first training step
  double forward_gflop = 0;   // per image (models/flops.h)
  std::optional<double> mfu;  // 3 x forward FLOPs x images/s per rank / peak
  std::optional<double> peak_memory_gib;  // GPU: the most this rank's allocator held
};

TrainBenchResult run_train_bench(const TrainBenchOptions& options);

}  // namespace ddpx::bench
