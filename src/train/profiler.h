// `--profile DIR`: records a window of training steps with libtorch's profiler (Kineto, the
// engine behind torch.profiler) and writes one Chrome/Perfetto trace per rank,
// DIR/rank<R>.trace.json, holding the operators (and GPU kernels on a GPU) and ddpx's own step
// phases as user ranges:
//   ddpx::step, ddpx::data_wait, ddpx::forward (with the loss), ddpx::backward,
//   ddpx::allreduce bucket <i> (each bucket's all-reduce launch, parallel/data/reducer.cpp),
//   ddpx::allreduce_wait (waiting for them at the end of backward), ddpx::optimizer.
// After the window, rank 0 prints a table of the phases: ms per step on every rank, the share of
// the step, and the slowest rank. On a CPU a phase's time is its range's; on a GPU, where the
// host only queues work, it is the GPU's time between CUDA events at the range's two ends. Stopping
// is collective (the table is all-reduced); every rank runs the same number of steps, so all stop
// together.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/context.h"

namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace ddpx::train {

inline constexpr const char* kRangeStep = "ddpx::step";
inline constexpr const char* kRangeDataWait = "ddpx::data_wait";
inline constexpr const char* kRangeForward = "ddpx::forward";
inline constexpr const char* kRangeBackward = "ddpx::backward";
inline constexpr const char* kRangeAllreduce = "ddpx::allreduce";  // prefix: launch and wait
inline constexpr const char* kRangeOptimizer = "ddpx::optimizer";

// Checks that `dir` can be created and written; throws kUsage naming --profile otherwise.
void check_profile_dir(const std::string& dir);

// Milliseconds per recorded step of each phase, from a finished recording's events.
struct PhaseTimes {
  std::vector<std::string> phases;  // "step", "data_wait", ...
  std::vector<double> ms;           // the same order
};
PhaseTimes phase_times(const torch::autograd::profiler::ProfilerResult& result, int64_t steps);

class DeviceRangeTimer;

class StepProfiler {
 public:
  StepProfiler(std::string dir, int64_t skip, int64_t steps, const torch::Device& device,
               dist::Context& context);
  ~StepProfiler();

  void before_step();  // starts recording once `skip` steps have passed
  void after_step();   // stops after `steps` recorded steps (collective)
  void finish();       // stops a window that training ended early (collective)

 private:
  void stop();

  std::string dir_;
  int64_t skip_, steps_;
  torch::Device device_;
  dist::Context& context_;
  int64_t seen_ = 0, recorded_ = 0;
  bool recording_ = false, done_ = false;
  std::unique_ptr<DeviceRangeTimer> device_timer_;  // GPUs only, while recording
};

}  // namespace ddpx::train
