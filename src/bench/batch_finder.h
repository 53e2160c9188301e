// `ddpx tune batch_size`: which batch per device to train with. It runs a few training steps
// (forward, cross-entropy, backward, SGD with momentum) of the model on random images at growing
// batch sizes and measures images/s and peak memory at each; a language model's steps are on
// windows of random token ids, with AdamW (its recommendation, as `ddpx plan` assumes), in
// tokens/s.
//   On a GPU: doubles the batch until CUDA runs out of memory (caught, the cache emptied), then
//   bisects between the last size that fitted and the first that did not; the recommendation is
//   the largest size whose peak stays under (1 - margin) of the GPU's memory.
//   On a CPU: doubles up to --max_batch or until the peak resident memory passes the budget
//   (default: half of MemAvailable); the recommendation is the knee, the smallest size within
//   10% of the best images/s (larger batches only cost memory and updates per epoch).
// Output: a table, then the recommendation as a flag to paste into `ddpx train`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/choices.h"
#include "models/stem.h"
#include "optim/amp.h"

namespace ddpx::bench {

struct BatchFinderOptions {
  std::string model = "resnet18";
  models::Stem stem = models::Stem::kImagenet;
  int64_t image_size = 32;
  int64_t num_classes = 10;
  int64_t start_batch = 8;
  int64_t max_batch = 4096;
  int64_t steps = 3;             // timed steps per size, after one warm-up step
  double margin = 0.10;          // GPU: memory share kept free
  double memory_budget_gib = 0;  // CPU: 0 = half of MemAvailable
  int threads = 0;
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;
  optim::Amp amp = optim::Amp::kOff;
  bool channels_last = false;
  // A language model (GPT, BERT): windows of `seq_len` random token ids (0: its context) over
  // `vocab_size` tokens (0: its tokenizer's), AdamW as its recommendation; `bias`: a GPT's.
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  bool bias = true;
};

struct BatchTrial {
  int64_t batch = 0;
  bool fits = false;    // ran, with the peak under the limit (less the margin on a GPU)
  double per_sec = 0;   // images/s, or a language model's tokens/s
  double peak_gib = 0;  // GPU: allocator peak; CPU: process peak resident memory
};

struct BatchFinderResult {
  std::string device;              // "cuda:0 (NVIDIA H100 ...)" or "cpu"
  std::string amp;                 // "bf16", or with --amp auto "bf16 (auto: this CPU has ...)"
  double memory_limit_gib = 0;     // the GPU's memory or the CPU budget
  std::vector<BatchTrial> trials;  // in the order tried
  int64_t recommended = 0;         // 0: not even the start batch fits
  std::string reason;
};

BatchFinderResult find_batch_size(const BatchFinderOptions& options);
void print_batch_finder(const BatchFinderOptions& options, const BatchFinderResult& result);

}  // namespace ddpx::bench
