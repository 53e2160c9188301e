// The recipe's micro-batch, as the parallel plan runs it (parallel/plan.h): mixup or cutmix
// first, then the forward under autocast and the loss (label smoothing or soft targets) in the
// profiler's forward range, and backward from the loss scaled for fp16 and divided over the
// accumulation steps, in the backward range.
#pragma once

#include <torch/types.h>

#include <memory>

#include "data/loader.h"
#include "optim/loss_scaler.h"
#include "parallel/plan.h"
#include "train/mixing.h"
#include "train/options.h"

namespace ddpx::train {

// `mixer` draws its random mix now; `scaler` is null without fp16. The closures hold copies of
// what they need, so the result may outlive `batch`, but not `options` or `scaler`.
parallel::MicroBatch recipe_micro_batch(const TrainOptions& options, const torch::Device& device,
                                        const data::Batch& batch, BatchMixer& mixer,
                                        optim::LossScaler* scaler);

// The run's mixup/cutmix (off unless asked for), its random stream separate per rank.
std::unique_ptr<BatchMixer> make_mixer(const TrainOptions& options, int64_t num_classes, int rank);

}  // namespace ddpx::train
