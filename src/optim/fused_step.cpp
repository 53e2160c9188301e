// Fused SGD or AdamW, else the optimizer's step (see fused_step.h).
#include "optim/fused_step.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "optim/foreach_sgd.h"
#include "optim/fused_adamw.h"
#include "optim/sgd_kernel.h"

namespace ddpx::optim {

void fused_step(torch::optim::Optimizer& optimizer, bool device_kernel) {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd != nullptr && (device_kernel ? foreach_sgd_step(*sgd) : fused_sgd_step(*sgd))) return;
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer);
  if (adamw != nullptr && fused_adamw_step(*adamw)) return;
  optimizer.step();
}

const char* fused_step_name(torch::optim::Optimizer& optimizer, bool device_kernel) {
  if (auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    if (device_kernel) return "fused multi-tensor SGD on the device";
    if (fused_sgd_covers(*sgd)) return "fused SGD";
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) return "fused AdamW";
  return "the optimizer's own step";
}

}  // namespace ddpx::optim
