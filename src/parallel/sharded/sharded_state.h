// Sharded checkpoints' state: what each rank of a sharded plan saves of its own (its rows of every
// parameter and its optimizer over them, no gathering), the index that says how the parts split
// the model, and the whole state rebuilt from the parts of any world size, for any plan to load.
//
// A rank's part: "p<k>" for every parameter k of the model (in the model's parameter order): this
// rank's shard (shard_layout.h: ceil(rows / N) rows, zero padded), and "optimizer": the rank's
// optimizer over its shards as libtorch saves it (Optimizer::save), the shards in `order`.
// The index (written once): "world_size", "shard" (the mode's name), "names" and "shapes" of the
// parameters, "order" (the model index of each shard in the optimizer's parameter list),
// "buffer_names" and "b<j>" (buffers are whole on every rank: BatchNorm statistics).
//
// Parts that do not all hold every parameter (a pipeline's: each stage's parameters whole in its
// rank's part, or split over the parts of its replicas) say so in the index (PartHolders):
// "h<k>", the ranks whose parts hold parameter k's rows, in row order (a shard of a split over
// that many ranks; one rank: the whole tensor); "order<q>", rank q's optimizer's parameters (none:
// the part has no optimizer); "bh<j>", the rank whose part holds buffer j as "b<j>". An index
// without them is the layout above: every parameter split over every rank.
//
// assemble_whole() puts the rows of every part back into whole tensors and writes the archives
// an unsharded save writes: the model's (Module::save's nesting by submodule) and an unsharded
// optimizer's, built with the plan's factory over whole-shaped parameters in the model's order;
// so a sharded checkpoint loads through Plan::load_state_dict() at any world size, under any
// plan, in one process.
#pragma once

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <string>
#include <utility>
#include <vector>

#include "parallel/plan.h"
#include "parallel/sharded/shard_mode.h"
#include "parallel/sharded/shard_unit.h"

namespace ddpx::parallel {

// This rank's part. `order` as ModelOrder (optimizer_state.h); `optimizer` over the units' shards
// in the units' order.
void write_local_part(const std::vector<ShardUnit>& units,
                      const std::vector<std::vector<size_t>>& order,
                      torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& part);

// The index. `model` for the parameters' names and shapes and the buffers (whole).
void write_part_index(torch::nn::Module& model, const std::vector<std::vector<size_t>>& order,
                      int world_size, ShardMode mode, torch::serialize::OutputArchive& index);

// Which part holds what, by the model's parameter and buffer indices (named_parameters() and
// named_buffers() order); the world size is orders.size().
struct PartHolders {
  std::vector<std::vector<int64_t>> params;  // per parameter: the ranks holding its rows, in order
  std::vector<std::vector<int64_t>> orders;  // per rank: its optimizer's parameters (may be none)
  std::vector<int64_t> buffers;              // per buffer: the rank whose part holds it
};

// The index of parts laid out by `holders`. `model` for the names and shapes.
void write_holders_index(torch::nn::Module& model, const PartHolders& holders, ShardMode mode,
                         torch::serialize::OutputArchive& index);

// A part of such a layout: (model index, rows this rank holds) for its parameters, (index,
// value) for its buffers, and its optimizer (null: none) over the parameters in its order.
void write_holder_part(const std::vector<std::pair<size_t, torch::Tensor>>& params,
                       const std::vector<std::pair<size_t, torch::Tensor>>& buffers,
                       torch::optim::Optimizer* optimizer, torch::serialize::OutputArchive& part);

// The parts of one sharded checkpoint as read from disk; `name` labels errors (the folder).
struct ShardedParts {
  std::string name;
  torch::serialize::InputArchive index;
  std::vector<torch::serialize::InputArchive> parts;  // by rank
};

// The world size the index says (kData naming `name` when it has none).
int parts_world_size(torch::serialize::InputArchive& index, const std::string& name);

// The whole model and optimizer archives, as an unsharded plan's state_dict() writes them.
// `make_optimizer`: the loading plan's factory (plan.h). Throws kData naming the part and the
// parameter for a part that does not match the index.
void assemble_whole(ShardedParts& parts, const OptimizerFactory& make_optimizer,
                    torch::serialize::OutputArchive& model,
                    torch::serialize::OutputArchive& optimizer);

// The whole model archive only (for `ddpx export` and evaluation: no optimizer needed).
void assemble_model(ShardedParts& parts, torch::serialize::OutputArchive& model);

// An output archive as an input archive (through its bytes), on `device`.
torch::serialize::InputArchive reopen(torch::serialize::OutputArchive& archive,
                                      const torch::Device& device);

}  // namespace ddpx::parallel
