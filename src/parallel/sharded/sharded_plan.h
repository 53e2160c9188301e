// The sharded data-parallel plan (plan.h): ZeRO-1/2/3, FSDP2's per-parameter sharding, for any
// torch::nn::Module. Every rank sees its own part of the global batch, as with DDP, but the
// optimizer state (--shard optimizer), also the averaged gradients (gradients), and also the
// parameters (full) are split across the ranks: each parameter along dim 0 (shard_layout.h),
// grouped in units (units.h) that communicate together (shard_unit.h).
//
// One step:
// - forward: with `full`, a unit's parameters are gathered (all-gather) when an operator first
//   reads them (param_gate.h: libtorch has no module pre-hooks) and released when another unit
//   starts; the next unit's gather is started early (prefetch, in the order the first step
//   recorded). Every unit but the root is released once forward ends.
// - backward: with `full`, units are gathered again as backward reaches them (the previous unit
//   prefetched). As soon as a unit's gradients are all accumulated, their reduce-scatter starts
//   (overlapping the rest of backward); after backward each rank holds the average of its
//   shards' gradients, and (gradients, full) the whole gradients are dropped.
// - step: the optimizer (built by the factory over the shards) updates this rank's shards;
//   with `optimizer` and `gradients` the units are then all-gathered so every rank holds the
//   whole updated parameters (2 x parameter bytes a step in all: reduce-scatter + all-gather);
//   with `full` nothing more (3 x: gather in forward and backward, reduce-scatter).
// The parameters equal the data-parallel plan's after the same steps, up to the order of sums.
//
// Buffers (BatchNorm statistics) are whole on every rank and, as DDP does, rank 0's are
// broadcast before each forward. state_dict() is the whole model and the whole optimizer state
// of an unsharded optimizer (optimizer_state.h), so checkpoints load at any world size and
// under any plan; write_part() is this rank's shards alone, for checkpoints written sharded.
// module() is the whole model (gathered by `full`), for evaluation and EMA. Needs a process group
// (more than one rank).
//
// Deterministic (--deterministic with --shard): each rank runs its atoms of the batch
// (parallel/data/atoms.h) on the whole model (`full` gathers every unit for the atoms and
// reshards after them: between steps the parameters stay sharded), sums their gradients in the
// atoms' tree, and each unit's reduce becomes an all-to-all whose rows every rank sums in the
// same tree (shard_unit.h). Buffers are replayed from the atoms' statistics, not broadcast.
// The shards then hold the bits of the deterministic data-parallel plan's gradient slices, and
// the optimizer's step is elementwise, so the weights are that plan's on any world size.
// Needs a power-of-two world size; no gradient accumulation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "distributed/bucket_policy.h"
#include "parallel/data/atoms.h"
#include "parallel/plan.h"
#include "parallel/sharded/param_gate.h"
#include "parallel/sharded/scratch_pool.h"
#include "parallel/sharded/shard_mode.h"
#include "parallel/sharded/shard_unit.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

class UnitReducer;

struct ShardedOptions {
  ShardMode mode = ShardMode::kFull;
  std::vector<std::string> units;  // submodule paths (units.h); empty: every block
  bool broadcast_buffers = true;   // rank 0's buffers before each forward, as DDP
  bool prefetch = true;            // start the next unit's all-gather early (full)
  bool sync_bn = false;            // --sync_bn: convert the model's BatchNorm layers
  // What the units' all-gathers send (FSDP's param_dtype): Undefined sends the shards as they
  // are (fp32); kBFloat16 / kHalf half the bytes, the parameters rounded to it between
  // full-precision gathers (state_dict(); module() under --shard full). Reduce-scatters stay in
  // the gradients' dtype, and the optimizer steps fp32 shards.
  c10::ScalarType gather_dtype = c10::ScalarType::Undefined;
  // --deterministic: atoms of this many samples, 0 for off (see "Deterministic" above).
  int64_t deterministic_atom = 0;
  uint64_t seed = 0;       // the atoms' dropout streams
  std::string model_name;  // for errors
};

class ShardedPlan : public Plan, private GateListener {
 public:
  // Collective (broadcasts rank 0's parameters and buffers). `context` must outlive the plan.
  ShardedPlan(torch::nn::AnyModule model, dist::Context& context,
              const OptimizerFactory& make_optimizer, ShardedOptions options);
  ~ShardedPlan() override;

  std::string describe() override;
  MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) override;
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step() override;
  void zero_grad() override;
  std::vector<torch::Tensor> parameters() override;  // this rank's shards
  void state_dict(torch::serialize::OutputArchive& model,
                  torch::serialize::OutputArchive& optimizer) override;
  void load_state_dict(torch::serialize::InputArchive& model,
                       torch::serialize::InputArchive& optimizer) override;
  // The model, whole on every rank: with `full` every unit is gathered (FSDP's
  // summon_full_params) and stays whole, the gate quiet, until the next forward_backward() or
  // step(), so evaluation may run any number of batches on each rank without communicating.
  torch::nn::AnyModule& module() override;
  // With `full` this rank's shards (in the model's parameter order) and the buffers; otherwise
  // the whole model's, which every rank holds between steps.
  std::vector<HeldTensor> held_tensors() override;
  void held_changed() override;  // `full`: the gathered units released, module() gathers again
  // Sharded checkpoints (sharded_state.h): each rank writes its shards and its optimizer.
  bool saves_sharded() override { return true; }
  void write_part(torch::serialize::OutputArchive& part) override;
  void write_index(torch::serialize::OutputArchive& index) override;
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }

  const std::vector<ShardUnit>& units() const { return units_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  int sync_bn_layers() const { return sync_bn_layers_; }

 private:
  enum class Phase { kIdle, kForward, kBackward };

  void on_use(const std::vector<int>& units) override;
  void gather_all();  // every unit's parameters whole (state_dict, load, refresh)
  void release_all(bool keep_root);
  MicroBatchResult forward_backward_atoms(const MicroBatch& batch, bool sync);

  torch::nn::AnyModule model_;
  dist::Context& context_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  OptimizerFactory make_optimizer_;
  ShardedOptions options_;
  int sync_bn_layers_ = 0;
  dist::BucketPolicy policy_;      // where the shards and buffers live; whether the group averages
  ScratchPool scratch_;            // the units' collective buffers (outlives them)
  bool gathers_in_place_ = false;  // from peer memory straight into the parameters

  std::vector<ShardUnit> units_;
  std::vector<std::vector<size_t>> model_order_;  // units_[u].params()[i] is model param [u][i]
  std::vector<torch::Tensor> shards_;             // in the model's parameter order
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ParamGate> gate_;  // full only
  std::unique_ptr<Atoms> atoms_;     // deterministic only

  std::unique_ptr<UnitReducer> sync_;  // the units' reduce-scatters, launched in backward
  bool whole_ = false;                 // module() gathered every unit (full)

  Phase phase_ = Phase::kIdle;
  std::vector<int> order_;  // units in the order the first forward used them
  bool order_known_ = false;
  std::vector<int> position_;  // unit -> index in order_, -1 if never used in forward
  int forward_reach_ = -1;     // this forward's farthest position in order_ yet
};

}  // namespace ddpx::parallel
