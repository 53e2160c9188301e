// An optimizer's step through ddpx's fused SGD where that covers it, else the optimizer's own:
// the one place the plans choose between them (the data-parallel plan's step strategy, the
// sharded plan). Either way the parameters and the state are what torch::optim::SGD::step()
// leaves, to the bit.
#pragma once

#include <torch/optim/optimizer.h>

namespace ddpx::optim {

// `device_kernel`: ATen's multi-tensor kernel (foreach_sgd.h, for GPU parameters), else the
// one-pass CPU kernel (sgd_kernel.h). An optimizer that is not SGD, or an SGD setting neither
// covers, takes its own step().
void fused_step(torch::optim::Optimizer& optimizer, bool device_kernel);

}  // namespace ddpx::optim
