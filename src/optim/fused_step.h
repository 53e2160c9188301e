// An optimizer's step through ddpx's fused SGD or ATen's fused AdamW (fused_adamw.h) where those
// cover it, else the optimizer's own: the one place the plans choose between them (the
// data-parallel plan's step strategy, the sharded plan). Fused SGD leaves the parameters and
// the state that torch::optim::SGD::step() leaves, to the bit; fused AdamW the same update up to
// rounding.
#pragma once

#include <torch/optim/optimizer.h>

namespace ddpx::optim {

// `device_kernel`: ATen's multi-tensor kernel (foreach_sgd.h, for GPU parameters), else the
// one-pass CPU kernel (sgd_kernel.h); AdamW takes ATen's fused kernel on either. Any other
// optimizer, or a setting the kernels do not cover, takes its own step().
void fused_step(torch::optim::Optimizer& optimizer, bool device_kernel);

// What fused_step() runs for `optimizer` as it is set up now, for a plan's start-up line: "fused
// SGD", "fused multi-tensor SGD on the device", "fused AdamW" or "the optimizer's own step".
const char* fused_step_name(torch::optim::Optimizer& optimizer, bool device_kernel);

}  // namespace ddpx::optim
