// The tensor-parallel plan's whole model and state (see tensor_parallel_plan.h): the whole
// model's split parameters freed while the pieces train and gathered back from them for
// evaluation, export and checkpoints; the unsplit model's checkpoint assembled from each rank's
// pieces and their optimizer state, and taken apart again on load.
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <string>

#include "distributed/context.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/sharded_state.h"
#include "parallel/storage.h"
#include "parallel/tensor/tensor_parallel_plan.h"

namespace ddpx::parallel {
namespace {

// The named parameters of `module`, by name.
std::map<std::string, torch::Tensor> params_by_name(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters()) out[p.key()] = p.value();
  return out;
}

}  // namespace

void TensorParallelPlan::hold_whole() {
  for (size_t i = 0; i < whole_split_.size(); ++i)
    materialize_storage(whole_split_[i], whole_split_nbytes_[i]);
  whole_held_ = true;
}

void TensorParallelPlan::free_whole() {
  for (const auto& t : whole_split_) free_storage(t);
  whole_held_ = false;
  stale_ = true;
}

void TensorParallelPlan::refresh_whole() {
  if (!stale_) return;
  hold_whole();
  inner_->module();  // ZeRO-3: the pieces gathered from their shards
  torch::NoGradGuard no_grad;
  auto whole = params_by_name(*whole_.ptr());
  for (const auto& p : split_.ptr()->named_parameters()) {
    auto spec = specs_.find(p.key());
    if (spec == specs_.end()) continue;  // shared with the whole model
    whole.at(p.key()).copy_(tensor::gather_whole(p.value(), spec->second, *tensor_group_));
  }
  stale_ = false;
}

void TensorParallelPlan::held_changed() {
  inner_->held_changed();
  stale_ = true;
}

torch::nn::AnyModule& TensorParallelPlan::module() {
  refresh_whole();
  return whole_;
}

void TensorParallelPlan::state_dict(torch::serialize::OutputArchive& model,
                                    torch::serialize::OutputArchive& optimizer) {
  refresh_whole();
  whole_.ptr()->save(model);
  // The pieces' optimizer as the inner plan has it, over this rank's whole pieces (a sharded
  // inner plan gathers its shards' state), then each piece's state gathered like the piece into
  // the unsplit optimizer's.
  torch::serialize::OutputArchive piece_model, piece_optimizer;
  inner_->state_dict(piece_model, piece_optimizer);
  auto pieces = make_optimizer_(split_.ptr()->parameters());
  {
    auto in = reopen(piece_optimizer, torch::kCPU);
    pieces->load(in);
  }
  auto whole = params_by_name(*whole_.ptr());
  auto full = make_optimizer_(whole_.ptr()->parameters());
  copy_groups(*pieces, *full);
  for (const auto& p : split_.ptr()->named_parameters()) {
    auto it = pieces->state().find(p.value().unsafeGetTensorImpl());
    if (it == pieces->state().end()) continue;  // the same on every rank: all stepped or none
    auto state = it->second->clone();
    auto spec = specs_.find(p.key());
    map_state(*state, [&](const torch::Tensor& t) {
      const torch::Tensor here = t.to(p.value().device());
      if (spec == specs_.end()) return here.clone();
      return tensor::gather_whole(here, spec->second, *tensor_group_);
    });
    full->state()[whole.at(p.key()).unsafeGetTensorImpl()] = std::move(state);
  }
  full->save(optimizer);
}

void TensorParallelPlan::load_state_dict(torch::serialize::InputArchive& model,
                                         torch::serialize::InputArchive& optimizer) {
  torch::NoGradGuard no_grad;
  // ZeRO-3 first: the pieces and the unsplit layers (shared with the whole model) get their
  // memory back before the whole model's values are loaded into them.
  inner_->module();
  hold_whole();
  whole_.ptr()->load(model);
  auto whole = params_by_name(*whole_.ptr());
  auto full = make_optimizer_(whole_.ptr()->parameters());
  full->load(optimizer);
  // This rank's pieces and their optimizer state, handed to the inner plan as its own
  // checkpoint (a sharded one keeps its shards of them).
  auto pieces = make_optimizer_(split_.ptr()->parameters());
  copy_groups(*full, *pieces);
  const int rank = tensor_group_->rank(), ranks = tensor_group_->world_size();
  for (const auto& p : split_.ptr()->named_parameters()) {
    auto spec = specs_.find(p.key());
    const torch::Tensor& source = whole.at(p.key());
    if (spec != specs_.end()) {
      p.value().copy_(tensor::take_shard(source, spec->second, rank, ranks));
    }
    auto it = full->state().find(source.unsafeGetTensorImpl());
    if (it == full->state().end()) continue;
    auto state = it->second->clone();
    map_state(*state, [&](const torch::Tensor& t) {
      if (spec == specs_.end()) return t.clone();
      return tensor::take_shard(t, spec->second, rank, ranks);
    });
    pieces->state()[p.value().unsafeGetTensorImpl()] = std::move(state);
  }
  torch::serialize::OutputArchive piece_model, piece_optimizer;
  split_.ptr()->save(piece_model);
  pieces->save(piece_optimizer);
  const torch::Device device = split_.ptr()->parameters().empty()
                                   ? torch::Device(torch::kCPU)
                                   : split_.ptr()->parameters()[0].device();
  auto model_in = reopen(piece_model, device);
  auto optimizer_in = reopen(piece_optimizer, device);
  inner_->load_state_dict(model_in, optimizer_in);
  stale_ = false;
}

}  // namespace ddpx::parallel
