// Naming the tensors a plan holds (HeldModel::held_tensors(), plan.h): a module's parameters then
// its buffers under their names, or some of them (a stage's, a shard of each) under the names the
// whole model gives them.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "parallel/plan.h"

namespace ddpx::parallel {

// Every parameter, then every buffer, of `module`, in registration order.
std::vector<HeldTensor> module_tensors(torch::nn::Module& module);

// `tensors[i]` named as `module` names `named[i]` (the tensor itself, or the parameter it is
// a shard of); "?" for one the module does not hold.
std::vector<HeldTensor> named_as_in(torch::nn::Module& module,
                                    const std::vector<torch::Tensor>& named,
                                    const std::vector<torch::Tensor>& tensors);

}  // namespace ddpx::parallel
