// Joining the job for `ddpx train`: threads, the process group and device from the options, the
// numbers derived from them and the job (the batch per rank, the LR schedule), and the one-line
// advice when a rank's device runs out of memory.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <memory>

#include "train/options.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::train {

// Sets the thread counts, joins the job described by the environment (collective), checks
// --amp on the rank's device and sets cuDNN's autotuning (--cudnn_benchmark).
std::shared_ptr<dist::Context> join_job(const TrainOptions& options);

// --batch_size per rank (divided by the world size with --batch_size_scaled).
int64_t per_rank_batch(const TrainOptions& options, int world_size);

// The schedule over num_epochs epochs of `updates_per_epoch` optimizer steps, warmup included.
std::unique_ptr<LrSchedule> make_schedule(const TrainOptions& options, double learning_rate,
                                          int64_t updates_per_epoch);

// Throws kUsage advising a smaller batch, for an out-of-memory error `e` while training.
[[noreturn]] void fail_out_of_memory(const TrainOptions& options, int rank,
                                     const torch::Device& device, int64_t batch_size);

}  // namespace ddpx::train
