// The deterministic plan (see deterministic_plan.h).
#include "parallel/data/deterministic_plan.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "optim/clip_grad.h"
#include "optim/learning_rate.h"
#include "parallel/held_tensors.h"

namespace ddpx::parallel {

DeterministicPlan::DeterministicPlan(torch::nn::AnyModule model, dist::Context& context,
                                     const OptimizerFactory& make_optimizer,
                                     DeterministicOptions options)
    : model_(std::move(model)),
      context_(context),
      options_(std::move(options)),
      make_optimizer_(make_optimizer) {
  check_atoms(context_.world_size(), options_.atom);
  optimizer_ = make_optimizer(model_.ptr()->parameters());
  std::vector<torch::Tensor> trained;
  for (const auto& p : model_.ptr()->parameters())
    if (p.requires_grad()) trained.push_back(p);
  atoms_ = std::make_unique<Atoms>(*model_.ptr(), std::move(trained), options_.atom, options_.seed,
                                   options_.model_name);
}

DeterministicPlan::~DeterministicPlan() = default;

void DeterministicPlan::broadcast_once() {
  if (broadcast_ || !context_.distributed()) {
    broadcast_ = true;
    return;
  }
  std::vector<torch::Tensor> state = model_.ptr()->parameters();
  for (const auto& b : model_.ptr()->buffers()) state.push_back(b);
  torch::NoGradGuard no_grad;
  dist::broadcast_coalesced(*context_.process_group(), state, /*root=*/0);
  broadcast_ = true;
}

std::string DeterministicPlan::describe() {
  broadcast_once();
  const int w = context_.world_size();
  std::string norms =
      atoms_->norm_layers() == 0
          ? std::string()
          : fmt::format(", BatchNorm over each atom ({} layers, running statistics replayed)",
                        atoms_->norm_layers());
  return fmt::format(
      "optimizer step: the optimizer's own | plan: deterministic data parallel over {} rank(s) "
      "(atoms of {} samples, each its own forward and backward, summed in a fixed tree{}; "
      "gradients all-gathered: {}x the gradient a rank a step; needs the same global batch, "
      "--deterministic_atom and --threads ({} now) on every run)",
      w, options_.atom, norms, w, at::get_num_threads());
}

int DeterministicPlan::norm_layers() const { return atoms_->norm_layers(); }

MicroBatchResult DeterministicPlan::forward_backward(const MicroBatch& batch, bool sync) {
  DDPX_CHECK(
      sync, ErrorKind::kInternal,
      "the deterministic plan takes no gradient accumulation (train/options.cpp refuses it)");
  broadcast_once();
  optim::apply_learning_rate(*optimizer_, batch.learning_rate);
  MicroBatchResult result;
  const auto mine = atoms_->run(
      model_, batch, context_.rank(), [this] { optimizer_->zero_grad(); }, result);
  auto* group = context_.distributed() ? context_.process_group().get() : nullptr;
  auto total = tree_sum(
      gather_ranks(group, mine, "--deterministic: all-gather of the ranks' gradient sums"));
  total.div_(static_cast<double>(batch.input.size(0) / options_.atom * context_.world_size()));
  atoms_->set_gradient(total);
  atoms_->replay_norms(group);
  return result;
}

std::vector<HeldTensor> DeterministicPlan::held_tensors() { return module_tensors(*model_.ptr()); }

torch::Tensor DeterministicPlan::clip_grad_norm(double max_norm) {
  // Every rank holds the same whole gradient: the local norm is the global one, bit for bit.
  return optim::clip_grad_norm(model_.ptr()->parameters(), max_norm);
}

void DeterministicPlan::step() { optimizer_->step(); }

void DeterministicPlan::zero_grad() { optimizer_->zero_grad(); }

std::vector<torch::Tensor> DeterministicPlan::parameters() { return model_.ptr()->parameters(); }

void DeterministicPlan::state_dict(torch::serialize::OutputArchive& model,
                                   torch::serialize::OutputArchive& optimizer) {
  model_.ptr()->save(model);
  optimizer_->save(optimizer);
}

void DeterministicPlan::load_state_dict(torch::serialize::InputArchive& model,
                                        torch::serialize::InputArchive& optimizer) {
  DDPX_CHECK(!broadcast_, ErrorKind::kInternal,
             "the deterministic plan loads a state only before it is first used");
  model_.ptr()->load(model);
  optimizer_->load(optimizer);
}

}  // namespace ddpx::parallel
