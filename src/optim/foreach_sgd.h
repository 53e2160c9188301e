// torch::optim::SGD's step as ATen's fused multi-tensor kernel (_fused_sgd_, as
// torch.optim.SGD(fused=True)): one kernel launch per parameter group instead of about six per
// parameter. Meant for GPU parameters, where libtorch's per-parameter step is bound by kernel
// launches; on CPU ddpx's own one-pass kernel (sgd_kernel.h) is used instead. The optimizer's
// state (momentum buffers) is kept as libtorch keeps it, so checkpoints are unchanged.
#pragma once

#include <torch/optim/sgd.h>

namespace ddpx::optim {

// One SGD step (dampening 0, floating parameters, each group on one device). Returns false,
// having changed nothing, when the optimizer has a setting or parameter it does not cover.
bool foreach_sgd_step(torch::optim::SGD& sgd);

}  // namespace ddpx::optim
