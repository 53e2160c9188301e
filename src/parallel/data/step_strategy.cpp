// The optimizer step strategy (see step_strategy.h).
#include "parallel/data/step_strategy.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "distributed/context.h"
#include "optim/fused_step.h"
#include "parallel/data/ddp.h"
#include "parallel/data/sharded_sgd.h"

namespace ddpx::parallel {

StepStrategy::StepStrategy(torch::optim::Optimizer& optimizer, const dist::Context& context,
                           DistributedDataParallel* ddp, StepOptions options)
    : optimizer_(optimizer) {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd != nullptr && ddp != nullptr && ddp->distributed() && options.split) {
    sharded_ = ShardedSgd::create(*sgd, context.process_group(), context.peer_memory());
  }
  if (sharded_) {
    kind_ = options.inside_backward && sharded_->step_in_backward(*ddp) ? Kind::kSplitInBackward
                                                                        : Kind::kSplit;
  } else if (sgd != nullptr && options.fused) {
    // The one-pass CPU kernel walks contiguous memory (not channels_last weights).
    bool on_cpu = true, contiguous = true;
    for (const auto& group : sgd->param_groups()) {
      for (const auto& p : group.params()) {
        on_cpu = on_cpu && p.device().is_cpu();
        contiguous = contiguous && p.is_contiguous();
      }
    }
    kind_ = !on_cpu ? Kind::kFusedDevice : contiguous ? Kind::kFused : Kind::kPlain;
  } else if (dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr && options.fused) {
    kind_ = Kind::kFusedAdamw;  // a parameter the kernel does not take falls back, step by step
  }
}

StepStrategy::~StepStrategy() = default;

const char* StepStrategy::describe() const {
  switch (kind_) {
    case Kind::kSplitInBackward:
      return "SGD split across the ranks of this host, inside backward";
    case Kind::kSplit:
      return "SGD split across the ranks of this host, after backward";
    case Kind::kFused:
      return "fused SGD";
    case Kind::kFusedDevice:
      return "fused multi-tensor SGD on the device";
    case Kind::kFusedAdamw:
      return "fused AdamW";
    case Kind::kPlain:
      break;
  }
  return "the optimizer's own step";
}

void StepStrategy::step(bool synced) {
  switch (kind_) {
    case Kind::kSplitInBackward:
      // Checks that backward stepped every bucket; after a no_sync backward there is no update.
      if (synced) sharded_->step();
      return;
    case Kind::kSplit:
      return sharded_->step();
    case Kind::kFused:
      return optim::fused_step(optimizer_, /*device_kernel=*/false);
    case Kind::kFusedDevice:
    case Kind::kFusedAdamw:
      return optim::fused_step(optimizer_, /*device_kernel=*/true);
    case Kind::kPlain:
      break;
  }
  optimizer_.step();
}

}  // namespace ddpx::parallel
