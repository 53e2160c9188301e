// The optimizer state of a sharded plan, whole (see optimizer_state.h).
#include "parallel/sharded/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <typeinfo>

#include "core/error.h"
#include "optim/lamb.h"
#include "optim/lars.h"

namespace ddpx::parallel {

void map_state(torch::optim::OptimizerParamState& state, const TensorMap& map) {
  auto f = [&](const torch::Tensor& t) { return t.defined() ? map(t) : t; };
  if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(&state)) {
    s->momentum_buffer(f(s->momentum_buffer()));
  } else if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(&state)) {
    s->exp_avg(f(s->exp_avg()));
    s->exp_avg_sq(f(s->exp_avg_sq()));
    s->max_exp_avg_sq(f(s->max_exp_avg_sq()));
  } else if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(&state)) {
    s->exp_avg(f(s->exp_avg()));
    s->exp_avg_sq(f(s->exp_avg_sq()));
    s->max_exp_avg_sq(f(s->max_exp_avg_sq()));
  } else if (auto* s = dynamic_cast<optim::LarsParamState*>(&state)) {
    s->momentum_buffer(f(s->momentum_buffer()));
  } else if (auto* s = dynamic_cast<optim::LambParamState*>(&state)) {
    s->exp_avg(f(s->exp_avg()));
    s->exp_avg_sq(f(s->exp_avg_sq()));
  } else {
    fail(ErrorKind::kUsage,
         "sharded checkpoints know the state of SGD, Adam, AdamW, LARS and LAMB, not of "
         "{}; use one of those with --shard, or --shard none",
         typeid(state).name());
  }
}

std::vector<torch::Tensor> state_tensors(torch::optim::OptimizerParamState& state) {
  std::vector<torch::Tensor> out;
  auto copy = state.clone();
  map_state(*copy, [&](const torch::Tensor& t) {
    out.push_back(t);
    return t;
  });
  return out;
}

namespace {

// Whole-shaped stand-ins of every parameter, in the model's order: what the unsharded optimizer
// of a checkpoint is built over.
std::vector<torch::Tensor> whole_params(std::vector<ShardUnit>& units, const ModelOrder& order) {
  size_t count = 0;
  for (const auto& u : order) count += u.size();
  std::vector<torch::Tensor> out(count);
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t i = 0; i < units[u].params().size(); ++i) {
      const auto& p = units[u].params()[i];
      out[order[u][i]] = torch::zeros(p.sizes(), p.options().requires_grad(false));
      out[order[u][i]].set_requires_grad(true);
    }
  }
  return out;
}

}  // namespace

void copy_groups(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  DDPX_CHECK(from.param_groups().size() == to.param_groups().size(), ErrorKind::kUsage,
             "sharded optimizer state: {} parameter groups where {} were expected",
             from.param_groups().size(), to.param_groups().size());
  for (size_t g = 0; g < from.param_groups().size(); ++g) {
    to.param_groups()[g].set_options(from.param_groups()[g].options().clone());
  }
}

void save_full_optimizer(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                         const ModelOrder& order, c10d::ProcessGroup& group,
                         const OptimizerFactory& make_optimizer,
                         torch::serialize::OutputArchive& archive) {
  auto whole = whole_params(units, order);
  auto full = make_optimizer(whole);
  copy_groups(sharded, *full);
  for (size_t u = 0; u < units.size(); ++u) {
    auto& unit = units[u];
    const auto& shards = unit.shards();
    // Whether the shards have state is the same on every rank (all stepped, or none yet).
    auto first = sharded.state().find(shards[0].unsafeGetTensorImpl());
    if (first == sharded.state().end()) continue;
    const size_t fields = state_tensors(*first->second).size();
    std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states;
    std::vector<std::vector<torch::Tensor>> local(fields);
    for (const auto& shard : shards) {
      auto& state = *sharded.state().at(shard.unsafeGetTensorImpl());
      auto tensors = state_tensors(state);
      for (size_t f = 0; f < fields; ++f) local[f].push_back(tensors[f]);
      states.push_back(state.clone());
    }
    // One all-gather per state field for the whole unit.
    std::vector<std::vector<torch::Tensor>> gathered(fields);
    for (size_t f = 0; f < fields; ++f) {
      if (local[f][0].defined()) gathered[f] = unit.gather_full(group, local[f]);
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      size_t f = 0;
      map_state(*states[i], [&](const torch::Tensor&) { return gathered[f++][i]; });
      full->state()[whole[order[u][i]].unsafeGetTensorImpl()] = std::move(states[i]);
    }
  }
  full->save(archive);
}

void load_full_optimizer(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                         const ModelOrder& order, int rank, const OptimizerFactory& make_optimizer,
                         torch::serialize::InputArchive& archive) {
  auto whole = whole_params(units, order);
  auto full = make_optimizer(whole);
  full->load(archive);
  take_shard_states(sharded, units, order, rank, *full, whole);
}

void take_shard_states(torch::optim::Optimizer& sharded, std::vector<ShardUnit>& units,
                       const ModelOrder& order, int rank, torch::optim::Optimizer& full,
                       const std::vector<torch::Tensor>& full_params) {
  copy_groups(full, sharded);
  sharded.state().clear();
  for (size_t u = 0; u < units.size(); ++u) {
    auto& unit = units[u];
    for (size_t i = 0; i < unit.shards().size(); ++i) {
      auto it = full.state().find(full_params.at(order[u][i]).unsafeGetTensorImpl());
      if (it == full.state().end()) continue;
      auto state = it->second->clone();
      const auto& shape = unit.shapes()[i];
      map_state(*state, [&](const torch::Tensor& t) {
        DDPX_CHECK(t.sizes() == unit.params()[i].sizes(), ErrorKind::kData,
                   "optimizer state of parameter {} has shape {}, the model's is {}",
                   unit.param_names()[i], c10::str(t.sizes()), c10::str(unit.params()[i].sizes()));
        return take_shard(t.to(unit.shards()[i].device()), shape, rank);
      });
      sharded.state()[unit.shards()[i].unsafeGetTensorImpl()] = std::move(state);
    }
  }
}

}  // namespace ddpx::parallel

namespace ddpx::parallel {

int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (auto& entry : optimizer.state()) {
    for (const auto& t : state_tensors(*entry.second)) {
      if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  return bytes;
}

}  // namespace ddpx::parallel
