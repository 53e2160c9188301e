#include "dist/sharded_sgd.h"

#include <cstring>
#include <numeric>

#include "core/env.h"
#include "core/error.h"
#include "dist/c10d_compat.h"
#include "dist/collectives.h"
#include "dist/process_group_shm.h"

namespace ddpx::dist {

#ifdef DDPX_HAVE_SHM_GROUP
namespace {

// Largest parameter first to the least loaded rank (ties: lower index, lower rank): within one
// parameter's size of an even split, and the same on every rank.
std::vector<int> balanced_owners(const std::vector<torch::Tensor>& params, int world) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(world, 0);
  std::vector<int> owners(params.size(), 0);
  for (size_t i : order) {
    int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = r;
    load[r] += params[i].numel();
  }
  return owners;
}

std::string state_key(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

}  // namespace

std::unique_ptr<ShardedSgd> ShardedSgd::create(torch::optim::SGD& sgd,
                                               std::shared_ptr<c10d::ProcessGroup> group) {
  if (!group || group->getSize() < 2 || env::get_or("DDPX_SHARDED_STEP", "1") == "0")
    return nullptr;
  ProcessGroupShm* shm = compat::shm_group(*group);
  // The same answer on every rank (one kind of group, one segment): no collective yet, so an
  // NCCL or multi-node group is never asked for one on CPU tensors.
  if (shm == nullptr || shm->arena() == nullptr) return nullptr;
  // 1. Does it apply here? Every rank finds out, then they agree (one rank may lack room).
  bool ok = true;
  std::vector<torch::Tensor> params;
  std::vector<bool> with_momentum;
  for (auto& param_group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(param_group.options());
    ok = ok && o.dampening() == 0;
    for (const auto& p : param_group.params()) {
      ok = ok && (p.scalar_type() == torch::kFloat32 || p.scalar_type() == torch::kFloat64);
      params.push_back(p);
      with_momentum.push_back(o.momentum() != 0);
    }
  }
  std::vector<Held> held(params.size());
  for (size_t i = 0; ok && i < params.size(); ++i) {
    held[i].param = shm->arena()->allocate(params[i].numel(), params[i].scalar_type());
    if (with_momentum[i])
      held[i].momentum = shm->arena()->allocate(params[i].numel(), params[i].scalar_type());
    ok = held[i].param.defined() && (!with_momentum[i] || held[i].momentum.defined());
  }
  torch::Tensor votes = torch::tensor({int64_t{ok}});
  all_reduce_sum(*group, votes, "sharded optimizer set-up");
  if (votes.item<int64_t>() != group->getSize()) return nullptr;

  // 2. Move every parameter and momentum buffer into the arena. A momentum buffer that does
  //    not exist yet starts at zero: with dampening 0, SGD's first update of a zero buffer
  //    (0 * momentum + grad) is exactly the clone of the gradient it would have made.
  torch::NoGradGuard no_grad;
  const std::vector<int> owners = balanced_owners(params, group->getSize());
  std::vector<int64_t> mine;
  auto offset_of = [&](const torch::Tensor& t) {
    auto at = shm->arena()->locate(t.data_ptr(), t.numel() * t.element_size());
    DDPX_CHECK(at.has_value(), ErrorKind::kInternal, "a sharded-optimizer tensor is not in the arena");
    return static_cast<int64_t>(*at);
  };
  for (size_t i = 0; i < params.size(); ++i) {
    held[i].owner = owners[i];
    held[i].param.copy_(params[i].detach().reshape({-1}));
    params[i].set_data(held[i].param.view(params[i].sizes()));
    held[i].param = params[i];
    mine.push_back(offset_of(held[i].param));
    if (!held[i].momentum.defined()) {
      mine.push_back(-1);
      continue;
    }
    torch::Tensor buffer = held[i].momentum.view(params[i].sizes());
    auto& state = sgd.state();
    auto it = state.find(state_key(params[i]));
    if (it != state.end()) {
      auto& sgd_state = static_cast<torch::optim::SGDParamState&>(*it->second);
      buffer.copy_(sgd_state.momentum_buffer());
      sgd_state.momentum_buffer(buffer);
    } else {
      auto fresh = std::make_unique<torch::optim::SGDParamState>();
      fresh->momentum_buffer(buffer);
      state[state_key(params[i])] = std::move(fresh);
    }
    held[i].momentum = buffer;
    mine.push_back(offset_of(buffer));
  }
  // 3. Where every rank keeps each of them: an owner writes into its peers' copies there.
  std::vector<int64_t> offsets;
  for (const auto& theirs : all_gather(*group, torch::tensor(mine, torch::kInt64))) {
    offsets.insert(offsets.end(), theirs.data_ptr<int64_t>(),
                   theirs.data_ptr<int64_t>() + theirs.numel());
  }
  return std::unique_ptr<ShardedSgd>(
      new ShardedSgd(sgd, std::move(group), *shm, std::move(held), std::move(offsets)));
}

ShardedSgd::ShardedSgd(torch::optim::SGD& sgd, std::shared_ptr<c10d::ProcessGroup> group,
                       ProcessGroupShm& shm, std::vector<Held> held, std::vector<int64_t> offsets)
    : sgd_(sgd), group_(std::move(group)), shm_(shm), held_(std::move(held)),
      offsets_(std::move(offsets)) {
  for (const auto& h : held_) {
    owners_.push_back(h.owner);
    data_.push_back(h.param.data_ptr());
    data_.push_back(h.momentum.defined() ? h.momentum.data_ptr() : nullptr);
  }
}

void ShardedSgd::check_unchanged() const {
  for (size_t i = 0; i < held_.size(); ++i) {
    const auto& p = held_[i].param;
    bool same = p.data_ptr() == data_[2 * i];
    if (held_[i].momentum.defined()) {
      auto it = sgd_.state().find(state_key(p));
      same = same && it != sgd_.state().end() &&
             static_cast<const torch::optim::SGDParamState&>(*it->second)
                     .momentum_buffer()
                     .data_ptr() == data_[2 * i + 1];
    }
    DDPX_CHECK(same, ErrorKind::kUsage,
               "parameter #{} or its momentum buffer was replaced after the sharded optimizer "
               "step was set up (a checkpoint loaded afterwards?); set it up again after such "
               "a change",
               i);
  }
}

void ShardedSgd::step() {
  check_unchanged();
  wait_work(shm_.submit([this](ShmAllreduce& shm) { step_on_comm_thread(shm); }),
            "sharded optimizer step");
}

void ShardedSgd::step_on_comm_thread(ShmAllreduce& shm) {
  const int rank = group_->getRank(), world = group_->getSize();
  const size_t n = held_.size();
  shm.barrier();  // every rank is done with this step's forward and backward
  // 1. libtorch's SGD on the parameters this rank owns: the others have no gradient for it.
  std::vector<torch::Tensor> parked(n);
  auto swap_others = [&] {  // parks the gradients of other ranks' parameters, or puts them back
    for (size_t i = 0; i < n; ++i)
      if (held_[i].owner != rank) std::swap(parked[i], held_[i].param.mutable_grad());
  };
  swap_others();
  try {
    sgd_.step();
  } catch (...) {
    swap_others();
    throw;
  }
  swap_others();
  // 2. Their new values and momentum into every peer's copies.
  for (size_t i = 0; i < n; ++i) {
    if (held_[i].owner != rank) continue;
    const size_t bytes = held_[i].param.numel() * held_[i].param.element_size();
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      const int64_t* at = &offsets_[(peer * n + i) * 2];
      std::memcpy(shm.arena_of(peer) + at[0], held_[i].param.data_ptr(), bytes);
      if (at[1] >= 0) std::memcpy(shm.arena_of(peer) + at[1], held_[i].momentum.data_ptr(), bytes);
    }
  }
  shm.barrier();  // every copy is whole before anyone's next forward
}

#else  // libtorch 2.x: no shared-memory group

std::unique_ptr<ShardedSgd> ShardedSgd::create(torch::optim::SGD&,
                                               std::shared_ptr<c10d::ProcessGroup>) {
  return nullptr;
}
void ShardedSgd::step() {}

#endif

}  // namespace ddpx::dist
