// torch::optim::AdamW's step as ATen's fused kernel (_fused_adamw_, what torch.optim.AdamW(
// fused=True) runs, on the CPU and on CUDA; the CUDA path has not yet run on a GPU): one pass over
// each parameter's memory instead of the about ten elementwise operations a parameter that
// libtorch's step runs (on a 2-core CPU they were a fifth of a GPT-2-sized model's step). The same
// update (decoupled weight decay, bias corrections; amsgrad too), up to the rounding of the fused
// arithmetic. The state is kept as libtorch keeps it (AdamWParamState: step, exp_avg, exp_avg_sq,
// max_exp_avg_sq), so checkpoints are unchanged and a run may resume under either step.
#pragma once

#include <torch/optim/adamw.h>

namespace ddpx::optim {

// One AdamW step. Returns false, having changed nothing, for a parameter the kernel does not
// take (not floating point, a sparse gradient, a group of two devices or dtypes, a gradient laid
// out otherwise than its parameter).
bool fused_adamw_step(torch::optim::AdamW& adamw);

}  // namespace ddpx::optim
