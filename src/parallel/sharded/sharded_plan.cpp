// The sharded data-parallel plan (see sharded_plan.h).
#include "parallel/sharded/sharded_plan.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/peer_memory.h"
#include "optim/clip_grad.h"
#include "optim/fused_step.h"
#include "optim/learning_rate.h"
#include "parallel/data/sync_batch_norm.h"
#include "parallel/held_tensors.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/sharded_state.h"
#include "parallel/sharded/unit_reducer.h"
#include "parallel/sharded/units.h"
#include "parallel/storage.h"

namespace ddpx::parallel {

ShardedPlan::ShardedPlan(torch::nn::AnyModule model, dist::Context& context,
                         const OptimizerFactory& make_optimizer, ShardedOptions options)
    : model_(std::move(model)),
      context_(context),
      group_(context.process_group()),
      make_optimizer_(make_optimizer),
      options_(std::move(options)),
      policy_(context.bucket_policy()),
      scratch_(policy_.allocate) {
  DDPX_CHECK(group_ != nullptr, ErrorKind::kInternal,
             "the sharded plan needs a process group (more than one rank)");
  DDPX_CHECK(options_.mode != ShardMode::kNone, ErrorKind::kInternal,
             "--shard none is the data-parallel plan");
  auto& module = *model_.ptr();
  if (options_.deterministic_atom > 0)
    check_atoms(context_.world_size(), options_.deterministic_atom);
  if (options_.sync_bn) {
    sync_bn_layers_ = convert_sync_batch_norm(module, context_);
    DDPX_CHECK(sync_bn_layers_ > 0, ErrorKind::kUsage,
               "--sync_bn: --model {} has no BatchNorm layers to synchronize; drop --sync_bn",
               options_.model_name);
  }
  auto named = module.named_parameters(/*recurse=*/true);
  // The units first: a --shard_units that names no layer is refused before anything is sent.
  const auto unit_specs = choose_units(module, options_.units);
  own_storages(module.parameters());
  // Every rank starts from rank 0's weights and buffers, as DDP does.
  {
    std::vector<torch::Tensor> state = module.parameters();
    for (const auto& b : module.buffers()) state.push_back(b);
    torch::NoGradGuard no_grad;
    dist::broadcast_coalesced(*group_, state, /*root=*/0);
  }

  // ZeRO-1/2 in full precision where the group has peer memory (ranks on one host): each unit's
  // parameters lie there, the shards their own rows (ShardUnit's `resident`), so a gather
  // copies only the peers' rows.
  const bool resident =
      options_.deterministic_atom == 0 &&
      keeps_resident(options_.mode, options_.gather_dtype, context_.peer_memory());
  std::map<std::string, size_t> index_of;
  for (size_t k = 0; k < named.size(); ++k) index_of[named[k].key()] = k;
  shards_.resize(named.size());
  for (const auto& spec : unit_specs) {
    std::vector<torch::Tensor> params;
    std::vector<size_t> order;
    for (const auto& name : spec.param_names) {
      order.push_back(index_of.at(name));
      params.push_back(named[order.back()].value());
    }
    units_.emplace_back(spec.name, params, spec.param_names, context_.rank(), context_.world_size(),
                        policy_.allocate, &scratch_, resident);
    model_order_.push_back(order);
    for (size_t i = 0; i < order.size(); ++i) shards_[order[i]] = units_.back().shards()[i];
  }
  // Full-precision gathers copy every rank's shards straight from the peer memory they lie in
  // into the parameters where every rank's lie there.
  gathers_in_place_ =
      gather_in_place_if_shared(units_, *group_, context_.world_size(), context_.peer_memory());
  optimizer_ = make_optimizer(shards_);
  if (options_.deterministic_atom > 0) {
    std::vector<torch::Tensor> trained;
    for (const auto& p : module.parameters())
      if (p.requires_grad()) trained.push_back(p);
    atoms_ = std::make_unique<Atoms>(module, std::move(trained), options_.deterministic_atom,
                                     options_.seed, options_.model_name);
  }
  if (options_.gather_dtype != c10::ScalarType::Undefined) {
    for (auto& unit : units_) unit.set_gather_dtype(options_.gather_dtype);
  }

  std::vector<ShardUnit*> reduced;
  for (auto& unit : units_) reduced.push_back(&unit);
  sync_ =
      std::make_unique<UnitReducer>(std::move(reduced), group_,
                                    /*free_full=*/options_.mode != ShardMode::kOptimizer, policy_);
  position_.assign(units_.size(), -1);

  if (options_.mode == ShardMode::kFull) {
    gate_ = std::make_unique<ParamGate>(static_cast<GateListener&>(*this));
    for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
      for (const auto& p : units_[u].params()) gate_->watch(p, u);
    }
    release_all(/*keep_root=*/false);
  }
}

ShardedPlan::~ShardedPlan() {}

std::string ShardedPlan::describe() {
  const char* what = options_.mode == ShardMode::kOptimizer ? "optimizer state"
                     : options_.mode == ShardMode::kGradients
                         ? "gradients and optimizer state"
                         : "parameters, gradients and optimizer state";
  const bool low = options_.gather_dtype != c10::ScalarType::Undefined && !units_.empty() &&
                   units_[0].gather_dtype() != units_[0].shards()[0].scalar_type();
  const std::string atoms =
      atoms_ ? fmt::format(
                   "; deterministic: atoms of {} samples, each its own forward and "
                   "backward, summed in a fixed tree{}, reduced by all-to-all",
                   atoms_->atom(),
                   atoms_->norm_layers() > 0
                       ? fmt::format(", BatchNorm over each atom ({} layers, running "
                                     "statistics replayed)",
                                     atoms_->norm_layers())
                       : std::string())
             : std::string();
  // Where the ranks' published memory is, as the transport names it.
  const std::string where = context_.peer_memory() ? context_.peer_memory()->where() : "";
  return fmt::format(
      "optimizer step: {}, on this rank's shards | plan: sharded "
      "data parallel over {} ranks (--shard {}, {}: {} split in {} units{}{}){}{}",
      // As step() chooses it.
      atoms_ && dynamic_cast<torch::optim::AdamW*>(optimizer_.get()) != nullptr
          ? "the optimizer's own step"
          : optim::fused_step_name(*optimizer_, !shards_.empty() && !shards_[0].device().is_cpu()),
      context_.world_size(), name(options_.mode), zero_stage(options_.mode), what, units_.size(),
      low ? fmt::format("; all-gathers in {}", c10::toString(options_.gather_dtype)) : "", atoms,
      gathers_in_place_ ? fmt::format("; all-gathers straight from {} into the parameters", where)
                        : "",
      !units_.empty() && units_[0].resident()
          ? fmt::format(" (the parameters in {}, each rank's shards their own rows: all-gathers "
                        "copy only the peers' rows)",
                        where)
          : "");
}

torch::nn::AnyModule& ShardedPlan::module() {
  if (gate_ && !whole_) {
    gather_all();
    whole_ = true;
  }
  return model_;
}

void ShardedPlan::on_use(const std::vector<int>& used) {
  if (whole_) return;  // every unit is gathered (module())
  for (int u : used) {
    units_[u].gather(*group_);  // waits for a prefetch, if one is under way
    if (phase_ == Phase::kForward && !order_known_ && position_[u] < 0) {
      position_[u] = static_cast<int>(order_.size());
      order_.push_back(u);
    }
  }
  // Prefetch: the unit after the last one used, in forward order (before it, in backward). In
  // forward only from the farthest unit reached yet: a unit used again later in the forward (the
  // root's tied embedding, for a GPT's head) is not where the forward goes next, and a unit
  // gathered then would be released unused.
  int next = -1;
  const int last = used.back();
  const bool forward = phase_ == Phase::kForward;
  if (options_.prefetch && order_known_ && position_[last] >= 0 &&
      (!forward || position_[last] >= forward_reach_)) {
    const int at = position_[last] + (forward ? 1 : -1);
    if (at >= 0 && at < static_cast<int>(order_.size())) next = order_[at];
  }
  if (forward) forward_reach_ = std::max(forward_reach_, position_[last]);
  // Release every other unit (the root stays through the step, as FSDP2 keeps its root).
  for (int v = 0; v < static_cast<int>(units_.size()); ++v) {
    if (v == next || units_[v].params().empty()) continue;
    if (std::find(used.begin(), used.end(), v) != used.end()) continue;
    const bool root = v == static_cast<int>(units_.size()) - 1 && units_[v].name() == "root";
    if (root && phase_ != Phase::kIdle) continue;
    if (units_[v].gathered() || units_[v].gather_pending()) units_[v].release();
  }
  if (next >= 0) units_[next].start_gather(*group_);
}

void ShardedPlan::gather_all() {
  ParamGate::Pause pause;
  for (auto& unit : units_) unit.start_gather(*group_, /*full_precision=*/true);
  for (auto& unit : units_) unit.finish_gather();
}

void ShardedPlan::release_all(bool keep_root) {
  whole_ = false;
  for (auto& unit : units_) {
    if (keep_root && unit.name() == "root" && &unit == &units_.back()) continue;
    if (unit.gathered() || unit.gather_pending()) unit.release();
  }
}

MicroBatchResult ShardedPlan::forward_backward(const MicroBatch& batch, bool sync) {
  optim::apply_learning_rate(*optimizer_, batch.learning_rate);
  if (atoms_) return forward_backward_atoms(batch, sync);
  auto& module = *model_.ptr();
  if (options_.broadcast_buffers) {
    auto buffers = module.buffers();
    if (!buffers.empty()) {
      torch::NoGradGuard no_grad;
      dist::broadcast_coalesced(*group_, buffers, /*root=*/0);
    }
  }
  MicroBatchResult r;
  auto forward = [&] {
    r.output = model_.forward(batch.input);
    r.loss = batch.loss(r.output, batch.target);
  };
  auto backward = [&] { (batch.backward_root ? batch.backward_root(r.loss) : r.loss).backward(); };
  if (whole_) {
    ParamGate::Pause pause;
    release_all(/*keep_root=*/false);  // module() left everything gathered
  }
  sync_->begin_iteration(sync);
  if (sync) sync_->arm_next_backward();
  phase_ = Phase::kForward;
  forward_reach_ = -1;
  try {
    batch.in_forward_context ? batch.in_forward_context(forward) : forward();
    if (gate_) {
      gate_->rethrow_pending();
      if (!order_.empty()) order_known_ = true;
      ParamGate::Pause pause;
      release_all(/*keep_root=*/true);  // reshard after forward
    }
    phase_ = Phase::kBackward;
    batch.in_backward_context ? batch.in_backward_context(backward) : backward();
    if (gate_) gate_->rethrow_pending();
  } catch (...) {
    phase_ = Phase::kIdle;
    sync_->disarm();
    if (gate_) gate_->rethrow_pending();  // the gate's error explains the operator's
    throw;
  }
  phase_ = Phase::kIdle;
  if (sync) sync_->finish();  // every unit's rows averaged
  if (gate_) {
    ParamGate::Pause pause;
    release_all(/*keep_root=*/false);  // reshard after backward
  }
  return r;
}

std::vector<HeldTensor> ShardedPlan::held_tensors() {
  auto& module = *model_.ptr();
  if (!gate_) return module_tensors(module);
  std::vector<HeldTensor> held = named_as_in(module, module.parameters(), shards_);
  for (const auto& b : module.named_buffers()) held.push_back({b.key(), b.value()});
  return held;
}

void ShardedPlan::held_changed() {
  if (!gate_) return;  // module() is the held tensors themselves
  ParamGate::Pause pause;
  release_all(/*keep_root=*/false);
}

torch::Tensor ShardedPlan::clip_grad_norm(double max_norm) {
  std::vector<optim::HeldGradient> grads;
  for (const auto& s : shards_) {
    if (s.grad().defined()) grads.push_back({s.grad()});
  }
  // The squares of every shard (padding is zero) summed over the ranks: the whole norm.
  optim::NormSum sum;
  sum.all_reduce_sum = [this](torch::Tensor& t) {
    dist::all_reduce_sum(*group_, t, "the gradient norm of --clip_grad_norm");
  };
  return optim::clip_by_global_norm(grads, sum, max_norm);
}

void ShardedPlan::step() {
  // SGD through the data-parallel plan's kernels (bit-identical to libtorch's step): one pass
  // over memory on a CPU, ATen's multi-tensor kernel on a GPU; AdamW through ATen's fused
  // kernel, but libtorch's own step under --deterministic, whose bits must be the unsharded
  // deterministic plan's (whose step is libtorch's); anything else its own step.
  if (atoms_ && dynamic_cast<torch::optim::AdamW*>(optimizer_.get()) != nullptr)
    optimizer_->step();
  else
    optim::fused_step(*optimizer_, !shards_.empty() && !shards_[0].device().is_cpu());
  ParamGate::Pause pause;
  if (options_.mode == ShardMode::kFull) {
    release_all(/*keep_root=*/false);  // whatever is gathered is out of date
    return;
  }
  // Every rank's updated shards, whole on every rank: two units in flight at a time.
  for (auto& unit : units_) unit.mark_stale();
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].start_gather(*group_);
    if (u > 0) units_[u - 1].finish_gather();
  }
  if (!units_.empty()) units_.back().finish_gather();
}

void ShardedPlan::zero_grad() {
  for (auto& s : shards_) s.mutable_grad() = torch::Tensor();
  for (auto& unit : units_) {
    for (auto p : unit.params()) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<torch::Tensor> ShardedPlan::parameters() { return shards_; }

void ShardedPlan::state_dict(torch::serialize::OutputArchive& model,
                             torch::serialize::OutputArchive& optimizer) {
  gather_all();
  {
    ParamGate::Pause pause;
    model_.ptr()->save(model);
  }
  save_full_optimizer(*optimizer_, units_, model_order_, *group_, make_optimizer_, optimizer);
  // The archive refers to the parameters' storage until the caller writes it out: they stay
  // whole, as after module(), until the next forward_backward() or step().
  whole_ = gate_ != nullptr;
}

void ShardedPlan::load_state_dict(torch::serialize::InputArchive& model,
                                  torch::serialize::InputArchive& optimizer) {
  gather_all();
  ParamGate::Pause pause;
  model_.ptr()->load(model);
  for (auto& unit : units_) {
    unit.restore_storage();
    unit.shard_from_params();
  }
  load_full_optimizer(*optimizer_, units_, model_order_, context_.rank(), make_optimizer_,
                      optimizer);
  if (gate_) release_all(/*keep_root=*/false);
}

void ShardedPlan::write_part(torch::serialize::OutputArchive& part) {
  write_local_part(units_, model_order_, *optimizer_, part);
}

void ShardedPlan::write_index(torch::serialize::OutputArchive& index) {
  // The index's order is the optimizer's: built over shards_, the model's order, which is not
  // the units' where a unit gathers parameters from apart (a GPT's embedding and head).
  std::vector<size_t> optimizer_order(shards_.size());
  for (size_t k = 0; k < optimizer_order.size(); ++k) optimizer_order[k] = k;
  write_part_index(*model_.ptr(), {optimizer_order}, context_.world_size(), options_.mode, index);
}

}  // namespace ddpx::parallel
