// The pipeline plan's whole model and state (see pipeline_plan.h): the other stages' memory freed
// while a rank trains, every stage brought to every rank for export and whole checkpoints, the
// unsplit optimizer's state assembled from each pipeline rank's, so such a checkpoint is the
// data-parallel plan's; and checkpoints by stage, each rank writing what it holds.
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "distributed/collectives.h"
#include "distributed/context.h"
#include "parallel/held_tensors.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/sharded_state.h"
#include "parallel/storage.h"

namespace ddpx::parallel {
namespace {

// Each tensor's index in `tensors` (the model's parameters or buffers, in their order).
std::map<const c10::TensorImpl*, size_t> indices_of(const std::vector<torch::Tensor>& tensors) {
  std::map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) index[tensors[i].unsafeGetTensorImpl()] = i;
  return index;
}

}  // namespace

void PipelinePlan::free_others() {
  for (const auto& t : others_) free_storage(t);
  others_held_ = false;
  whole_ = false;
}

void PipelinePlan::gather_whole() {
  torch::NoGradGuard no_grad;
  if (sharded()) gather_units(/*full_precision=*/true);
  for (size_t i = 0; i < others_.size(); ++i) materialize_storage(others_[i], others_nbytes_[i]);
  others_held_ = true;
  if (group_) {
    std::set<const c10::TensorImpl*> sent;  // a tied parameter from its first stage's rank
    for (const StageInfo& s : table_) {
      std::vector<torch::Tensor> state;
      for (size_t l = s.first_layer; l < s.end_layer; ++l) {
        for (const auto* list : {&layers_[l].parameters, &layers_[l].buffers}) {
          for (const auto& t : *list)
            if (sent.insert(t.unsafeGetTensorImpl()).second) state.push_back(t);
        }
      }
      dist::broadcast_coalesced(*group_, state, s.pipeline_rank);  // replica 0's rank
    }
  }
  whole_ = true;
}

void PipelinePlan::set_training(bool on) {
  model_.ptr()->train(on);
  // Evaluation runs each replica's own share of batches, so no replica can gather on the way.
  if (!on && sharded()) gather_units(/*full_precision=*/true);
}

Plan::Share PipelinePlan::eval_share(int /*rank*/, int /*world_size*/) {
  return {replica_, replica_count_};
}

torch::nn::AnyModule& PipelinePlan::module() {
  if (!whole_) gather_whole();
  return model_;
}

std::vector<HeldTensor> PipelinePlan::held_tensors() {
  auto& module = *model_.ptr();
  std::vector<HeldTensor> held = named_as_in(module, params_, sharded() ? shards_ : params_);
  for (auto& b : named_as_in(module, buffers_, buffers_)) held.push_back(std::move(b));
  return held;
}

void PipelinePlan::held_changed() {
  whole_ = false;
  for (auto& unit : units_) unit.mark_stale();  // gathered from the shards again
}

void PipelinePlan::state_dict(torch::serialize::OutputArchive& model,
                              torch::serialize::OutputArchive& optimizer) {
  if (!whole_) gather_whole();
  model_.ptr()->save(model);
  // The unsplit optimizer's state: each pipeline rank's, from replica 0, moved into an optimizer
  // over the whole model in its parameter order (the data-parallel plan's archive).
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer_(model_.ptr()->parameters());
  if (optimizer_) copy_groups(*optimizer_, *whole);
  // Sharded replicas put their stage's optimizer state together first (every replica takes part).
  const std::string gathered = sharded() ? save_optimizer_part() : std::string();
  for (int r = 0; r < options_.stages; ++r) {
    std::string bytes;
    if (r == context_.rank() && sharded()) {
      bytes = gathered;
    } else if (r == context_.rank() && optimizer_) {
      torch::serialize::OutputArchive archive;
      optimizer_->save(archive);
      std::ostringstream out;
      archive.save_to(out);
      bytes = out.str();
    }
    torch::Tensor size = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64);
    context_.broadcast(size, r);
    if (size.item<int64_t>() == 0) continue;
    torch::Tensor data = torch::empty({size.item<int64_t>()}, torch::kUInt8);
    if (r == context_.rank()) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
    context_.broadcast(data, r);
    std::vector<torch::Tensor> theirs = params_of(r);
    std::unique_ptr<torch::optim::Optimizer> part = make_optimizer_(theirs);
    std::istringstream in(
        std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(data.numel())));
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    part->load(archive);
    for (auto& t : theirs) {
      auto it = part->state().find(t.unsafeGetTensorImpl());
      if (it != part->state().end())
        whole->state()[t.unsafeGetTensorImpl()] = std::move(it->second);
    }
  }
  whole->save(optimizer);
}

void PipelinePlan::load_state_dict(torch::serialize::InputArchive& model,
                                   torch::serialize::InputArchive& optimizer) {
  for (size_t i = 0; i < others_.size(); ++i) materialize_storage(others_[i], others_nbytes_[i]);
  others_held_ = true;
  if (sharded()) gather_units(/*full_precision=*/true);  // memory for the values loaded
  model_.ptr()->load(model);
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer_(model_.ptr()->parameters());
  whole->load(optimizer);
  if (sharded()) {
    for (auto& unit : units_) {
      unit.restore_storage();
      unit.shard_from_params();
    }
    load_optimizer_part(*whole);
  } else if (optimizer_) {
    for (auto& t : params_) {
      auto it = whole->state().find(t.unsafeGetTensorImpl());
      if (it != whole->state().end())
        optimizer_->state()[t.unsafeGetTensorImpl()] = std::move(it->second);
    }
    copy_groups(*whole, *optimizer_);
  }
  whole_ = true;
}

void PipelinePlan::write_part(torch::serialize::OutputArchive& part) {
  // Sharded replicas each hold a shard of their stages; unsharded ones hold copies, and replica
  // 0's is the one kept (gather_whole() broadcasts the same).
  const bool shards_stages = sharded();
  const bool holds = shards_stages || replica_ == 0;
  const auto param_index = indices_of(model_.ptr()->parameters());
  const auto buffer_index = indices_of(model_.ptr()->buffers());
  std::vector<std::pair<size_t, torch::Tensor>> params, buffers;
  if (holds) {
    for (size_t i = 0; i < params_.size(); ++i) {
      params.emplace_back(param_index.at(params_[i].unsafeGetTensorImpl()),
                          shards_stages ? shards_[i] : params_[i]);
    }
  }
  if (replica_ == 0) {
    for (const auto& b : buffers_) {
      if (b.defined()) buffers.emplace_back(buffer_index.at(b.unsafeGetTensorImpl()), b);
    }
  }
  write_holder_part(params, buffers, holds ? optimizer_.get() : nullptr, part);
}

void PipelinePlan::write_index(torch::serialize::OutputArchive& index) {
  const int world = context_.world_size();
  // The same test every rank's sharded() makes (a rank whose stages have no parameters builds
  // no units, but holds none of the rows either).
  const bool shards_stages = options_.shard != ShardMode::kNone && replica_count_ > 1;
  const auto param_index = indices_of(model_.ptr()->parameters());
  const auto buffer_index = indices_of(model_.ptr()->buffers());
  PartHolders holders;
  holders.params.resize(param_index.size());
  holders.buffers.assign(buffer_index.size(), 0);
  holders.orders.resize(static_cast<size_t>(world));
  for (const StageInfo& s : table_) {
    // The stage's rank in each replica (replica 0's alone where the replicas do not shard).
    const std::vector<int> replicas =
        mesh_.group_of(mesh_.rank_with(context_.rank(), MeshDim::kPipeline, s.pipeline_rank),
                       {MeshDim::kReplicate, MeshDim::kShard});
    const std::vector<int64_t> ranks(replicas.begin(),
                                     shards_stages ? replicas.end() : replicas.begin() + 1);
    for (size_t l = s.first_layer; l < s.end_layer; ++l) {
      for (const auto& t : layers_[l].parameters)
        holders.params[param_index.at(t.unsafeGetTensorImpl())] = ranks;
      for (const auto& t : layers_[l].buffers) {
        if (t.defined())
          holders.buffers[buffer_index.at(t.unsafeGetTensorImpl())] = s.pipeline_rank;
      }
    }
  }
  // Rank q's optimizer steps its stages' parameters (params_'s order on that rank: its stages
  // chunk by chunk, layer by layer); unsharded replicas past the first write none.
  for (int q = 0; q < world; ++q) {
    if (!shards_stages && mesh_.data_rank(q) > 0) continue;
    for (const auto& t : params_of(mesh_.coordinate(MeshDim::kPipeline, q))) {
      holders.orders[static_cast<size_t>(q)].push_back(
          static_cast<int64_t>(param_index.at(t.unsafeGetTensorImpl())));
    }
  }
  write_holders_index(*model_.ptr(), holders, options_.shard, index);
}

}  // namespace ddpx::parallel
