// Test accuracy and loss: every share of the test set (data::eval_indices) is evaluated once, the
// correct counts are summed over ranks, so the accuracy is that of the whole test set. A share is a
// rank's with a whole model (the EMA's, data parallel), or a replica's under a plan that splits
// the model (a pipeline's ranks pass one batch through their stages).
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "data/loader.h"
#include "distributed/context.h"
#include "optim/amp.h"
#include "parallel/plan.h"
#include "train/task.h"

namespace ddpx::train {

struct EvalSetup {
  torch::Device device = torch::kCPU;
  optim::Amp amp = optim::Amp::kOff;
  bool channels_last = false;
};

struct EvalResult {
  double accuracy = 0;  // of every prediction (an image's class, a window's every next token)
  double loss = 0;      // mean cross-entropy per prediction
};

// The seed's "Accuracy on test dataset - X" line (`label` after "test dataset", e.g. " (EMA)"),
// and for a language model the val loss and perplexity line after it.
void log_evaluation(const Task& task, const EvalResult& result, const std::string& label = "");

// Collective. `model` is put in evaluation mode (the caller puts it back in training mode).
EvalResult evaluate(torch::nn::AnyModule& model, data::DataLoader& loader, int64_t test_size,
                    dist::Context& context, const EvalSetup& setup);

// The same through the plan's evaluation (plan.h): its share, its forward.
EvalResult evaluate(parallel::Evaluation& plan, data::DataLoader& loader, int64_t test_size,
                    dist::Context& context, const EvalSetup& setup);

}  // namespace ddpx::train
