// The deterministic mode's atoms (see atoms.h).
#include "parallel/data/atoms.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include <utility>

#include "core/error.h"
#include "distributed/collectives.h"

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

// The sum of parts[lo, hi) in the tree: halves, then halves of halves.
torch::Tensor tree_of(const std::vector<torch::Tensor>& parts, size_t lo, size_t hi) {
  if (hi - lo == 1) return parts[lo].clone();
  const size_t mid = lo + (hi - lo) / 2;
  return tree_of(parts, lo, mid).add_(tree_of(parts, mid, hi));
}

}  // namespace

torch::Tensor tree_sum(const std::vector<torch::Tensor>& parts) {
  DDPX_CHECK(!parts.empty(), ErrorKind::kInternal, "tree_sum of no parts");
  return tree_of(parts, 0, parts.size());
}

void check_atoms(int world_size, int64_t atom) {
  DDPX_CHECK(power_of_two(world_size), ErrorKind::kUsage,
             "--deterministic: the world size {} is not a power of two; the ranks' gradients are "
             "summed in a binary tree, which needs 1, 2, 4, 8, ... processes",
             world_size);
  DDPX_CHECK(atom >= 1, ErrorKind::kUsage,
             "--deterministic_atom {}: expected at least 1 sample an atom", atom);
}

std::vector<torch::Tensor> gather_ranks(c10d::ProcessGroup* group, const torch::Tensor& local,
                                        const char* what) {
  if (group == nullptr) return {local};
  const int w = group->getSize();
  auto in = local.contiguous();
  auto out = torch::empty({w * in.numel()}, in.options());
  dist::wait_work(group->_allgather_base(out, in), what);
  return out.view({w, in.numel()}).unbind(0);
}

// The BatchNorm layers: their running statistics at the step's start, each atom's batch
// statistics (the layer run with momentum 1 leaves them in its buffers), and the replay.
struct Atoms::Norms {
  struct Layer {
    torch::nn::BatchNormOptions* options = nullptr;  // momentum
    torch::Tensor mean, var, batches;                // the layer's buffers
    double momentum = 0.1;
    torch::Tensor start_mean, start_var, start_batches;
  };
  std::vector<Layer> layers;
  std::vector<torch::Tensor> atoms;  // one row a local atom: every layer's mean, then var

  Norms(torch::nn::Module& model, const std::string& model_name) {
    auto add = [&](torch::nn::BatchNormOptions& options, torch::Tensor mean, torch::Tensor var,
                   torch::Tensor batches) {
      if (!options.track_running_stats()) return;
      DDPX_CHECK(options.momentum().has_value(), ErrorKind::kUsage,
                 "--deterministic: {} has a BatchNorm with a cumulative average (momentum "
                 "None), which the atoms' replay does not reproduce; give it a momentum",
                 model_name);
      Layer layer;
      layer.options = &options;
      layer.mean = mean;
      layer.var = var;
      layer.batches = batches;
      layer.momentum = *options.momentum();
      layers.push_back(std::move(layer));
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

Atoms::Atoms(torch::nn::Module& model, std::vector<torch::Tensor> params, int64_t atom,
             uint64_t seed, const std::string& model_name)
    : params_(std::move(params)),
      atom_(atom),
      seed_(seed),
      norms_(std::make_unique<Norms>(model, model_name)) {}

Atoms::~Atoms() = default;

int Atoms::norm_layers() const { return static_cast<int>(norms_->layers.size()); }

torch::Tensor Atoms::flat_gradient() {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(params_.size());
  for (const auto& p : params_) {
    pieces.push_back(p.grad().defined()
                         ? p.grad().reshape(-1).to(torch::kFloat)
                         : torch::zeros({p.numel()}, p.options().dtype(torch::kFloat)));
  }
  return torch::cat(pieces);
}

void Atoms::set_gradient(const torch::Tensor& flat) {
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

torch::Tensor Atoms::subtree(torch::nn::AnyModule& model, const MicroBatch& batch, int64_t lo,
                             int64_t hi, MicroBatchResult& result,
                             std::vector<torch::Tensor>& losses) {
  if (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    auto left = subtree(model, batch, lo, mid, result, losses);
    return left.add_(subtree(model, batch, mid, hi, result, losses));
  }
  (*zero_grad_)();
  const uint64_t global_atom = static_cast<uint64_t>(first_atom_ + lo);
  torch::manual_seed(
      mix64(seed_ ^ mix64(static_cast<uint64_t>(step_) * 0x100000000ULL + global_atom)));
  torch::Tensor output, loss;
  auto forward = [&] {
    output = model.forward(batch.input.narrow(0, lo * atom_, atom_));
    loss = batch.loss(output, batch.target.narrow(0, lo * atom_, atom_));
  };
  auto backward = [&] { (batch.backward_root ? batch.backward_root(loss) : loss).backward(); };
  batch.in_forward_context ? batch.in_forward_context(forward) : forward();
  norms_->record();
  batch.in_backward_context ? batch.in_backward_context(backward) : backward();
  result.output =
      result.output.defined() ? torch::cat({result.output, output.detach()}) : output.detach();
  losses.push_back(loss.detach());
  return flat_gradient();
}

torch::Tensor Atoms::run(torch::nn::AnyModule& model, const MicroBatch& batch, int rank,
                         const std::function<void()>& zero_grad, MicroBatchResult& result) {
  const int64_t size = batch.input.size(0);
  DDPX_CHECK(size % atom_ == 0 && size > 0, ErrorKind::kUsage,
             "--deterministic: rank {}'s batch of {} samples is not a whole number of atoms of {} "
             "(--deterministic_atom); make the batch per process a multiple of {}",
             rank, size, atom_, atom_);
  first_atom_ = rank * (size / atom_);  // every rank holds as many atoms
  step_ = batch.step >= 0 ? batch.step : runs_;
  ++runs_;
  zero_grad_ = &zero_grad;
  std::vector<torch::Tensor> losses;
  norms_->begin();
  auto sum = subtree(model, batch, 0, size / atom_, result, losses);
  zero_grad_ = nullptr;
  result.loss = torch::stack(losses).mean();
  return sum;
}

void Atoms::replay_norms(c10d::ProcessGroup* group) {
  if (norms_->layers.empty()) return;
  const auto rows = torch::stack(norms_->atoms);  // (local atoms, statistics)
  const auto all = gather_ranks(group, rows.reshape(-1),
                                "--deterministic: all-gather of the atoms' BatchNorm statistics");
  norms_->replay(torch::cat(all).view({-1, rows.size(1)}));
}

}  // namespace ddpx::parallel
