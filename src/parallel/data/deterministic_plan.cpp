// The deterministic plan (see deterministic_plan.h).
#include "parallel/data/deterministic_plan.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "optim/clip_grad.h"

namespace ddpx::parallel {
namespace {

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// splitmix64's finalizer: a well-mixed 64-bit value from a 64-bit value.
uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The sum of parts[lo, hi) in the plan's tree: halves, then halves of halves.
torch::Tensor tree_of(const std::vector<torch::Tensor>& parts, size_t lo, size_t hi) {
  if (hi - lo == 1) return parts[lo].clone();
  const size_t mid = lo + (hi - lo) / 2;
  return tree_of(parts, lo, mid).add_(tree_of(parts, mid, hi));
}

}  // namespace

// The BatchNorm layers: their running statistics at the step's start, each atom's batch
// statistics (the layer run with momentum 1 leaves them in its buffers), and the replay.
struct DeterministicPlan::Norms {
  struct Layer {
    torch::nn::BatchNormOptions* options;  // momentum
    torch::Tensor mean, var, batches;      // the layer's buffers
    double momentum = 0.1;
    torch::Tensor start_mean, start_var, start_batches;
  };
  std::vector<Layer> layers;
  std::vector<torch::Tensor> atoms;  // one row a local atom: every layer's mean, then var

  explicit Norms(torch::nn::Module& model, const std::string& model_name) {
    auto add = [&](torch::nn::BatchNormOptions& options, torch::Tensor mean, torch::Tensor var,
                   torch::Tensor batches) {
      if (!options.track_running_stats()) return;
      DDPX_CHECK(options.momentum().has_value(), ErrorKind::kUsage,
                 "--deterministic: {} has a BatchNorm with a cumulative average (momentum "
                 "None), which the atoms' replay does not reproduce; give it a momentum",
                 model_name);
      layers.push_back({&options, mean, var, batches, *options.momentum()});
    };
    for (const auto& m : model.modules(/*include_self=*/true)) {
      if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
        add(bn->options, bn->running_mean, bn->running_var, bn->num_batches_tracked);
      } else if (auto* bn1 = m->as<torch::nn::BatchNorm1dImpl>()) {
        add(bn1->options, bn1->running_mean, bn1->running_var, bn1->num_batches_tracked);
      } else if (auto* bn3 = m->as<torch::nn::BatchNorm3dImpl>()) {
        add(bn3->options, bn3->running_mean, bn3->running_var, bn3->num_batches_tracked);
      }
    }
  }

  void begin() {
    atoms.clear();
    for (auto& l : layers) {
      l.start_mean = l.mean.clone();
      l.start_var = l.var.clone();
      l.start_batches = l.batches.clone();
      l.options->momentum(1.0);
    }
  }

  void record() {  // after an atom's forward
    if (layers.empty()) return;
    std::vector<torch::Tensor> row;
    for (auto& l : layers) row.push_back(l.mean.flatten());
    for (auto& l : layers) row.push_back(l.var.flatten());
    atoms.push_back(torch::cat(row));
  }

  // `all`: every atom's row of the global batch, in atom order.
  void replay(const torch::Tensor& all) {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    const int64_t atom_count = all.size(0);
    std::vector<int64_t> mean_at, var_at;
    for (auto& l : layers) mean_at.push_back(std::exchange(offset, offset + l.mean.numel()));
    for (auto& l : layers) var_at.push_back(std::exchange(offset, offset + l.var.numel()));
    for (size_t i = 0; i < layers.size(); ++i) {
      Layer& l = layers[i];
      auto mean = l.start_mean.clone();
      auto var = l.start_var.clone();
      for (int64_t a = 0; a < atom_count; ++a) {
        mean.mul_(1.0 - l.momentum).add_(all[a].narrow(0, mean_at[i], mean.numel()), l.momentum);
        var.mul_(1.0 - l.momentum).add_(all[a].narrow(0, var_at[i], var.numel()), l.momentum);
      }
      l.mean.copy_(mean.view_as(l.mean));
      l.var.copy_(var.view_as(l.var));
      l.batches.copy_(l.start_batches + atom_count);
      l.options->momentum(l.momentum);
    }
  }
};

DeterministicPlan::DeterministicPlan(torch::nn::AnyModule model, dist::Context& context,
                                     const OptimizerFactory& make_optimizer,
                                     DeterministicOptions options)
    : model_(std::move(model)),
      context_(context),
      options_(std::move(options)),
      make_optimizer_(make_optimizer) {
  DDPX_CHECK(power_of_two(context_.world_size()), ErrorKind::kUsage,
             "--deterministic: the world size {} is not a power of two; the ranks' gradients are "
             "summed in a binary tree, which needs 1, 2, 4, 8, ... processes",
             context_.world_size());
  DDPX_CHECK(options_.atom >= 1, ErrorKind::kUsage,
             "--deterministic_atom {}: expected at least 1 sample an atom", options_.atom);
  optimizer_ = make_optimizer(model_.ptr()->parameters());
  for (const auto& p : model_.ptr()->parameters())
    if (p.requires_grad()) params_.push_back(p);
  norms_ = std::make_unique<Norms>(*model_.ptr(), options_.model_name);
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
      norms_->layers.empty()
          ? std::string()
          : fmt::format(", BatchNorm over each atom ({} layers, running statistics replayed)",
                        norms_->layers.size());
  return fmt::format(
      "optimizer step: the optimizer's own | plan: deterministic data parallel over {} rank(s) "
      "(atoms of {} samples, each its own forward and backward, summed in a fixed tree{}; "
      "gradients all-gathered: {}x the gradient a rank a step; needs the same global batch, "
      "--deterministic_atom and --threads ({} now) on every run)",
      w, options_.atom, norms, w, at::get_num_threads());
}

torch::Tensor DeterministicPlan::flat_gradient() {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(params_.size());
  for (const auto& p : params_) {
    pieces.push_back(p.grad().defined()
                         ? p.grad().reshape(-1).to(torch::kFloat)
                         : torch::zeros({p.numel()}, p.options().dtype(torch::kFloat)));
  }
  return torch::cat(pieces);
}

void DeterministicPlan::set_gradient(const torch::Tensor& flat) {
  int64_t offset = 0;
  for (auto& p : params_) {
    auto piece = flat.narrow(0, offset, p.numel()).view_as(p).to(p.scalar_type());
    offset += p.numel();
    if (p.grad().defined()) {
      p.mutable_grad().copy_(piece);
    } else {
      p.mutable_grad() = piece.clone();
    }
  }
}

torch::Tensor DeterministicPlan::atoms_gradient(const MicroBatch& batch, int64_t lo, int64_t hi,
                                                MicroBatchResult& result,
                                                std::vector<torch::Tensor>& losses) {
  if (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    auto left = atoms_gradient(batch, lo, mid, result, losses);
    return left.add_(atoms_gradient(batch, mid, hi, result, losses));
  }
  const int64_t atom = options_.atom;
  const int64_t global_atom = context_.rank() * (batch.input.size(0) / atom) + lo;
  optimizer_->zero_grad();
  torch::manual_seed(mix64(options_.seed ^ mix64(static_cast<uint64_t>(steps_) * 0x100000000ULL +
                                                 static_cast<uint64_t>(global_atom))));
  torch::Tensor output, loss;
  auto forward = [&] {
    output = model_.forward(batch.input.narrow(0, lo * atom, atom));
    loss = batch.loss(output, batch.target.narrow(0, lo * atom, atom));
  };
  auto backward = [&] { (batch.backward_root ? batch.backward_root(loss) : loss).backward(); };
  if (batch.in_forward_context) {
    batch.in_forward_context(forward);
  } else {
    forward();
  }
  norms_->record();
  if (batch.in_backward_context) {
    batch.in_backward_context(backward);
  } else {
    backward();
  }
  result.output =
      result.output.defined() ? torch::cat({result.output, output.detach()}) : output.detach();
  losses.push_back(loss.detach());
  return flat_gradient();
}

std::vector<torch::Tensor> DeterministicPlan::gather(const torch::Tensor& local) {
  const int w = context_.world_size();
  if (!context_.distributed()) return {local};
  auto in = local.contiguous();
  auto out = torch::empty({w * in.numel()}, in.options());
  dist::wait_work(context_.process_group()->_allgather_base(out, in),
                  "--deterministic: all-gather of the ranks' gradient sums");
  return out.view({w, in.numel()}).unbind(0);
}

MicroBatchResult DeterministicPlan::forward_backward(const MicroBatch& batch, bool sync) {
  DDPX_CHECK(
      sync, ErrorKind::kInternal,
      "the deterministic plan takes no gradient accumulation (train/options.cpp refuses it)");
  broadcast_once();
  const int64_t size = batch.input.size(0), atom = options_.atom;
  DDPX_CHECK(size % atom == 0, ErrorKind::kUsage,
             "--deterministic: rank {}'s batch of {} samples is not a whole number of atoms of {} "
             "(--deterministic_atom); make the batch per process a multiple of {}",
             context_.rank(), size, atom, atom);
  const int64_t local_atoms = size / atom;
  MicroBatchResult result;
  std::vector<torch::Tensor> losses;
  norms_->begin();
  const torch::Tensor mine = atoms_gradient(batch, 0, local_atoms, result, losses);
  torch::Tensor total = tree_sum(gather(mine));
  total.div_(static_cast<double>(local_atoms * context_.world_size()));
  set_gradient(total);
  if (!norms_->layers.empty()) {
    const auto rows = torch::stack(norms_->atoms);  // (local atoms, statistics)
    norms_->replay(torch::cat(gather(rows.reshape(-1))).view({-1, rows.size(1)}));
  }
  result.loss = torch::stack(losses).mean();
  ++steps_;
  return result;
}

torch::Tensor DeterministicPlan::tree_sum(const std::vector<torch::Tensor>& parts) {
  DDPX_CHECK(!parts.empty(), ErrorKind::kInternal, "tree_sum of no parts");
  return tree_of(parts, 0, parts.size());
}

void DeterministicPlan::set_learning_rate(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

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
