// Peak memory of one training step: builds a model at its recommended input size, runs one
// step (forward, cross-entropy, backward, SGD with momentum 0.9) on a random batch and reports
// the process's resident memory before the build, after it, and at its peak (VmHWM), with the
// build and step times. bench/pytorch_memory.py is the torchvision peer and
// bench/compare_memory.sh runs both over the zoo (docs/performance.md, "Model memory").
#pragma once

#include <cstdint>
#include <string>

namespace ddpx::bench {

struct MemoryBenchOptions {
  std::string model = "resnet18";
  int64_t image_size = 0;  // 0: the model's default (registry) size
  int64_t batch_size = 2;
  int64_t num_classes = 1000;
  int threads = 0;   // 0: default_threads() (distributed/threads.h)
  bool bias = true;  // a GPT's biases (--no_bias: none)
};

struct MemoryBenchResult {
  int64_t image_size = 0;
  double baseline_mib = 0;  // VmRSS before the model is built (libtorch loaded)
  double built_mib = 0;     // VmRSS after the build
  double peak_mib = 0;      // VmHWM after the step: the process's peak
  double build_s = 0;
  double step_s = 0;
  double loss = 0;
};

MemoryBenchResult run_memory_bench(const MemoryBenchOptions& options);
// '#' header lines, then one line `memory model=... key=value ...` that compare_memory.sh reads.
void print_memory_bench(const MemoryBenchOptions& options, const MemoryBenchResult& result);

}  // namespace ddpx::bench
