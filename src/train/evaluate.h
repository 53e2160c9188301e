// Test accuracy: every rank evaluates its share of the test set (data::eval_indices), the
// correct counts are summed over ranks, so the accuracy is that of the whole test set.
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "data/loader.h"
#include "distributed/context.h"
#include "optim/amp.h"

namespace ddpx::train {

struct EvalSetup {
  torch::Device device = torch::kCPU;
  optim::Amp amp = optim::Amp::kOff;
  bool channels_last = false;
};

// Collective. `model` is put in evaluation mode (the caller puts it back in training mode).
double evaluate(torch::nn::AnyModule& model, data::DataLoader& loader, int64_t test_size,
                dist::Context& context, const EvalSetup& setup);

}  // namespace ddpx::train
