// The sharded plan's deterministic mode (see "Deterministic" in sharded_plan.h): the atoms on
// the whole model, then each unit reduced by an all-to-all summed in the atoms' tree.
#include "core/error.h"
#include "distributed/context.h"
#include "parallel/sharded/sharded_plan.h"

namespace ddpx::parallel {

MicroBatchResult ShardedPlan::forward_backward_atoms(const MicroBatch& batch, bool sync) {
  DDPX_CHECK(sync, ErrorKind::kInternal,
             "the deterministic mode takes no gradient accumulation (train/options.cpp refuses "
             "it)");
  if (gate_ && !whole_) {  // the atoms run on the whole model, the gate quiet
    gather_all();
    whole_ = true;
  }
  MicroBatchResult r;
  auto zero = [this] {
    for (auto& unit : units_) {
      for (auto p : unit.params()) p.mutable_grad() = torch::Tensor();
    }
  };
  try {
    atoms_->set_gradient(atoms_->run(model_, batch, context_.rank(), zero, r));
  } catch (...) {
    if (gate_) gate_->rethrow_pending();
    throw;
  }
  const int64_t atoms = batch.input.size(0) / atoms_->atom() * context_.world_size();
  for (auto& unit : units_) {
    unit.reduce_in_tree(*group_, atoms, /*free_full=*/options_.mode != ShardMode::kOptimizer);
  }
  atoms_->replay_norms(group_.get());
  if (gate_) {
    ParamGate::Pause pause;
    release_all(/*keep_root=*/false);
  }
  return r;
}

}  // namespace ddpx::parallel
