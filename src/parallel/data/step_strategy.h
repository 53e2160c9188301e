// How the data-parallel plan takes the optimizer step (data_parallel_plan.h), chosen once per run,
// the same for the trainer and `ddpx bench train`. In order of preference:
//   kSplitInBackward  SGD split across the ranks of one host (ShardedSgd), each full gradient
//                     bucket averaged and stepped inside backward: step() only checks;
//   kSplit            the same split, after backward;
//   kFused            SGD in one pass over memory (optim/sgd_kernel.h), bit-identical to
//                     libtorch's step (CPU parameters);
//   kFusedDevice      SGD as ATen's fused multi-tensor kernel (optim/foreach_sgd.h), one launch
//                     per group (GPU parameters: the split step is for CPU hosts);
//   kFusedAdamw       AdamW as ATen's fused kernel (optim/fused_adamw.h), CPU or GPU;
//   kPlain            the optimizer's own step().
// The split needs peer memory (dist::PeerMemory) and SGD with dampening 0; the step inside backward
// also needs nothing to read the averaged gradients between backward and the step (no clipping),
// and the learning rate of the update in the optimizer before backward (the plan writes the
// batch's there first, plan.h).
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

namespace ddpx::dist {
class Context;
}  // namespace ddpx::dist
namespace ddpx::parallel {
class DistributedDataParallel;
class ShardedSgd;

struct StepOptions {
  bool split = true;            // may split across ranks (DDPX_SHARDED_STEP=0 also refuses)
  bool inside_backward = true;  // may run inside backward (DDPX_STEP_IN_BACKWARD=0 also refuses)
  bool fused = true;            // may use the fused SGD pass or fused AdamW
};

class StepStrategy {
 public:
  enum class Kind { kSplitInBackward, kSplit, kFused, kFusedDevice, kFusedAdamw, kPlain };

  // Collective when `ddp` is distributed (all ranks construct it together, after DDP wraps the
  // model and any checkpoint is loaded). `optimizer` and `ddp` must outlive this object.
  StepStrategy(torch::optim::Optimizer& optimizer, const dist::Context& context,
               DistributedDataParallel* ddp, StepOptions options = {});
  ~StepStrategy();

  Kind kind() const { return kind_; }
  const char* describe() const;  // for the start-up line

  // The update after a backward. `synced` false: that backward ran under no_sync (bench's
  // compute-only steps): the split step after backward still runs then (every rank's model
  // uses the one shared copy), the one inside backward has nothing to do.
  void step(bool synced = true);

 private:
  torch::optim::Optimizer& optimizer_;
  std::unique_ptr<ShardedSgd> sharded_;
  Kind kind_ = Kind::kPlain;
};

}  // namespace ddpx::parallel
