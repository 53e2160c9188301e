// SyncBatchNorm for ddpx models (torch.nn.SyncBatchNorm.convert_sync_batchnorm's counterpart):
// every models::BatchNorm in a model computes its training statistics over the batches of all
// ranks, through differentiable all-reduces on the context's process group. Useful when the
// batch per rank is small (large models, detection); each BatchNorm layer costs two small
// all-reduces in forward and two in backward.
#pragma once

#include <torch/nn/module.h>

#include "distributed/context.h"

namespace ddpx::parallel {

// Switches every models::BatchNorm of `model` to statistics across the ranks of `context`;
// returns how many it switched (0: the model has none). A one-rank context changes nothing
// visible: the statistics of one batch are the local ones. `context` must outlive the model's
// training.
int convert_sync_batch_norm(torch::nn::Module& model, dist::Context& context);

}  // namespace ddpx::parallel
