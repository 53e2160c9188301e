// The optimizer state of a sharded plan, whole: a sharded plan's optimizer steps shards (each
// parameter's rows of this rank, shard_layout.h), so its per-parameter state tensors (momentum,
// Adam's moments) are shards too. save_full_optimizer() gathers them into the state an
// unsharded optimizer over the whole parameters would hold and saves that, so a checkpoint of
// any shard mode and world size is the plain libtorch optimizer archive the data-parallel plan
// writes; load_full_optimizer() reads such an archive and keeps this rank's rows.
//
// Per-parameter state tensors are known for the optimizers ddpx trains with: torch::optim's SGD,
// Adam and AdamW, and ddpx's LARS and LAMB (optim/). Scalars (Adam's step) are the same on every
// rank and copied. Another optimizer is refused with ddpx::Error(kUsage) naming it.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <vector>

#include "parallel/plan.h"
#include "parallel/sharded/shard_unit.h"

namespace ddpx::parallel {

// Replaces each per-parameter tensor of `state` (momentum, Adam's moments) by map(tensor), in a
// fixed order per optimizer; undefined ones stay undefined. Throws kUsage for an optimizer whose
// state it does not know.
using TensorMap = std::function<torch::Tensor(const torch::Tensor&)>;
void map_state(torch::optim::OptimizerParamState& state, const TensorMap& map);
// The per-parameter state tensors of `state`, in map_state()'s order (undefined ones included).
std::vector<torch::Tensor> state_tensors(torch::optim::OptimizerParamState& state);
// Copies every parameter group's options (learning rate, momentum, ...) from `from` to `to`.
void copy_groups(const torch::optim::Optimizer& from, torch::optim::Optimizer& to);

// Where each unit's parameters stand in the model's parameter order: order[u][i] is the model
// index of units[u].params()[i]. The unsharded optimizer is built over the parameters in the
// model's order, as the data-parallel plan's is, so both write the same archive.
using ModelOrder = std::vector<std::vector<size_t>>;

// Collective. `sharded` is the optimizer over the units' shards.
void save_full_optimizer(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                         const ModelOrder& order, c10d::ProcessGroup& group,
                         const OptimizerFactory& make_optimizer,
                         torch::serialize::OutputArchive& archive);

// Not collective: every rank reads the same archive and keeps its rows.
void load_full_optimizer(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                         const ModelOrder& order, int rank, const OptimizerFactory& make_optimizer,
                         torch::serialize::InputArchive& archive);

// The same from an unsharded optimizer already loaded: `full`, over `full_params`, where
// units[u].params()[i] corresponds to full_params[order[u][i]] (a pipeline's whole model, whose
// units are one rank's stages). Not collective.
void take_shard_states(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                       const ModelOrder& order, int rank, torch::optim::Optimizer& full,
                       const std::vector<torch::Tensor>& full_params);

}  // namespace ddpx::parallel

namespace ddpx::parallel {

// Bytes of every per-parameter state tensor `optimizer` holds (momentum, moments): what
// `ddpx bench memory` reports as optimizer state. Throws like save_full_optimizer() for an
// optimizer whose state it does not know.
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace ddpx::parallel
