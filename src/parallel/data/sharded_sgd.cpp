#include "parallel/data/sharded_sgd.h"

#include <exception>
#include <numeric>
#include <unordered_map>

#include "core/env.h"
#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/peer_memory.h"
#include "optim/sgd_kernel.h"
#include "parallel/data/ddp.h"

namespace ddpx::parallel {
using optim::sgd_state_key;
using optim::sgd_update;
using optim::sgd_update_mean;
using optim::SgdHyper;

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

}  // namespace

std::unique_ptr<ShardedSgd> ShardedSgd::create(torch::optim::SGD& sgd,
                                               std::shared_ptr<c10d::ProcessGroup> group,
                                               dist::PeerMemory* memory) {
  if (!group || group->getSize() < 2 || env::get_or("DDPX_SHARDED_STEP", "1") == "0")
    return nullptr;
  // The same answer on every rank (one kind of group, one segment): no collective yet, so an
  // NCCL or multi-node group is never asked for one on CPU tensors.
  if (memory == nullptr) return nullptr;
  // 1. Does it apply here? Every rank finds out, then they agree (one rank may lack room).
  bool ok = true;
  std::vector<torch::Tensor> params;
  std::vector<bool> with_momentum;
  std::vector<size_t> group_of;
  for (auto& param_group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(param_group.options());
    ok = ok && o.dampening() == 0;
    for (const auto& p : param_group.params()) {
      // CPU and contiguous: the flat step walks parameter, gradient and momentum in one order
      // (a channels_last parameter's gradient bucket view is channels_last too).
      ok = ok && (p.scalar_type() == torch::kFloat32 || p.scalar_type() == torch::kFloat64) &&
           p.device().is_cpu() && p.is_contiguous();
      params.push_back(p);
      with_momentum.push_back(o.momentum() != 0);
      group_of.push_back(&param_group - sgd.param_groups().data());
    }
  }
  // 2. Each parameter and its momentum buffer get one copy, in their owner's memory, that every
  //    rank's model and optimizer use: the owner's step writes it once for all ranks.
  const int rank = group->getRank();
  const std::vector<int> owners = balanced_owners(params, group->getSize());
  std::vector<Held> held(params.size());
  for (size_t i = 0; ok && i < params.size(); ++i) {
    held[i].owner = owners[i];
    held[i].group = group_of[i];
    if (owners[i] != rank) continue;
    held[i].param = memory->allocate(params[i].numel(), params[i].scalar_type(), /*kept=*/true);
    if (with_momentum[i])
      held[i].momentum =
          memory->allocate(params[i].numel(), params[i].scalar_type(), /*kept=*/true);
    ok = held[i].param.defined() && (!with_momentum[i] || held[i].momentum.defined());
  }
  torch::Tensor votes = torch::tensor({int64_t{ok}});
  dist::all_reduce_sum(*group, votes, "sharded optimizer set-up");
  if (votes.item<int64_t>() != group->getSize()) return nullptr;

  // 3. The owner fills its copies: the parameters are alike on every rank (DDP broadcast them);
  //    a momentum buffer that does not exist yet starts at zero, and with dampening 0 SGD's
  //    first update of a zero buffer (0 * momentum + grad) is exactly the clone it would make.
  torch::NoGradGuard no_grad;
  auto& state = sgd.state();
  std::vector<int64_t> mine;
  auto offset_of = [&](const torch::Tensor& t) {
    auto at = memory->offset_of(t);
    DDPX_CHECK(at.has_value(), ErrorKind::kInternal,
               "a sharded-optimizer tensor is not in the group's peer memory");
    return *at;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    if (owners[i] != rank) {
      mine.insert(mine.end(), {-1, -1});
      continue;
    }
    held[i].param.copy_(params[i].detach().reshape({-1}));
    mine.push_back(offset_of(held[i].param));
    auto it = state.find(sgd_state_key(params[i]));
    if (held[i].momentum.defined() && it != state.end())
      held[i].momentum.copy_(
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().reshape({-1}));
    mine.push_back(held[i].momentum.defined() ? offset_of(held[i].momentum) : -1);
  }
  // 4. Every rank learns where the owners put them (after they were filled) and switches its
  //    parameters and momentum buffers over to those copies.
  const int64_t n = static_cast<int64_t>(params.size());
  const auto where = dist::all_gather(*group, torch::tensor(mine, torch::kInt64));
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t* at = where[owners[i]].data_ptr<int64_t>() + 2 * static_cast<int64_t>(i);
    DDPX_CHECK(at[0] >= 0 && where[owners[i]].numel() == 2 * n, ErrorKind::kInternal,
               "rank {} did not publish parameter #{} it owns", owners[i], i);
    const auto dtype = params[i].scalar_type();
    if (owners[i] != rank) {
      held[i].param = memory->peer_view(owners[i], at[0], params[i].numel(), dtype);
      if (at[1] >= 0)
        held[i].momentum = memory->peer_view(owners[i], at[1], params[i].numel(), dtype);
    }
    params[i].set_data(held[i].param.view(params[i].sizes()));
    held[i].param = params[i];
    if (!held[i].momentum.defined()) continue;
    torch::Tensor buffer = held[i].momentum.view(params[i].sizes());
    auto it = state.find(sgd_state_key(params[i]));
    if (it != state.end()) {
      static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer(buffer);
    } else {
      auto fresh = std::make_unique<torch::optim::SGDParamState>();
      fresh->momentum_buffer(buffer);
      state[sgd_state_key(params[i])] = std::move(fresh);
    }
    held[i].momentum = buffer;
  }
  return std::unique_ptr<ShardedSgd>(
      new ShardedSgd(sgd, std::move(group), *memory, std::move(held)));
}

ShardedSgd::ShardedSgd(torch::optim::SGD& sgd, std::shared_ptr<c10d::ProcessGroup> group,
                       dist::PeerMemory& memory, std::vector<Held> held)
    : sgd_(sgd), group_(std::move(group)), memory_(memory), held_(std::move(held)) {
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
      auto it = sgd_.state().find(sgd_state_key(p));
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

bool ShardedSgd::step_in_backward(DistributedDataParallel& ddp) {
  if (!ddp.distributed() || env::get_or("DDPX_STEP_IN_BACKWARD", "1") == "0") return false;
  std::unordered_map<const void*, size_t> index_of;
  for (size_t i = 0; i < held_.size(); ++i) index_of[held_[i].param.unsafeGetTensorImpl()] = i;
  bool ok = true;
  for (const auto& p : ddp.module().parameters())
    ok = ok && (!p.requires_grad() || index_of.count(p.unsafeGetTensorImpl()) > 0);
  torch::Tensor votes = torch::tensor({int64_t{ok}});
  dist::all_reduce_sum(*group_, votes, "sharded optimizer step in backward");
  if (votes.item<int64_t>() != group_->getSize()) return false;
  ddp.register_comm_hook([this, index_of = std::move(index_of)](const GradBucket& bucket) {
    std::vector<Piece> pieces;
    for (size_t k = 0; k < bucket.params.size(); ++k)
      pieces.push_back(Piece{index_of.at(bucket.params[k].unsafeGetTensorImpl()), bucket.offsets[k],
                             bucket.params[k].numel()});
    ++buckets_applied_;
    return submit(
        "allreduce_sgd", bucket.buffer,
        [this, buffer = bucket.buffer, pieces = std::move(pieces)](dist::PeerSteps& steps) mutable {
          steps.reduce_apply(buffer,
                             [&](int64_t lo, int64_t n, const std::vector<const void*>& sources) {
                               apply(pieces, lo, n, sources);
                             });
        });
  });
  in_backward_ = true;
  return true;
}

void ShardedSgd::apply(const std::vector<Piece>& pieces, int64_t lo, int64_t n,
                       const std::vector<const void*>& sources) {
  const int world = static_cast<int>(sources.size());
  for (const Piece& piece : pieces) {
    const int64_t begin = std::max(lo, piece.offset);
    const int64_t end = std::min(lo + n, piece.offset + piece.numel);
    if (begin >= end) continue;
    const Held& h = held_[piece.held];
    auto run = [&](auto* param) {
      using T = std::remove_pointer_t<decltype(param)>;
      std::vector<const T*> grads(world);
      for (int k = 0; k < world; ++k) grads[k] = static_cast<const T*>(sources[k]) + begin;
      const int64_t at = begin - piece.offset;
      T* momentum = h.momentum.defined() ? h.momentum.data_ptr<T>() + at : nullptr;
      sgd_update_mean<T>(grads.data(), world, T(1) / static_cast<T>(world), param + at, momentum,
                         end - begin, hyper(h));
    };
    if (h.param.scalar_type() == torch::kFloat32)
      run(h.param.data_ptr<float>());
    else
      run(h.param.data_ptr<double>());
  }
}

void ShardedSgd::step() {
  check_unchanged();
  if (in_backward_) {
    DDPX_CHECK(buckets_applied_.exchange(0) > 0, ErrorKind::kUsage,
               "step() after a backward that did not synchronise gradients (no_sync?): the step "
               "runs in backward (ShardedSgd::step_in_backward), so there is none to take; call "
               "step() only after a synchronised backward");
    return;
  }
  dist::wait_work(
      submit("sgd_step", {}, [this](dist::PeerSteps& steps) { step_on_comm_thread(steps); }),
      "sharded optimizer step");
}

c10::intrusive_ptr<c10d::Work> ShardedSgd::submit(const char* name, const torch::Tensor& tensor,
                                                  std::function<void(dist::PeerSteps&)> op) {
  std::vector<at::Tensor> tensors;
  if (tensor.defined()) tensors.push_back(tensor);
  return dist::submit_steps(*group_, memory_, name, tensors, std::move(op));
}

void ShardedSgd::step_on_comm_thread(dist::PeerSteps& steps) {
  steps.barrier();  // every rank is done with this step's forward and backward
  // The parameters this rank owns, in one pass each (sgd_kernel.h: libtorch's SGD, bit for
  // bit), in place in the one copy every rank uses. An error still reaches the second barrier,
  // so the peers fail with it instead of waiting out the timeout.
  std::exception_ptr error;
  try {
    step_owned();
  } catch (...) {
    error = std::current_exception();
  }
  steps.barrier();  // every update is done before anyone's next forward
  if (error) std::rethrow_exception(error);
}

void ShardedSgd::step_owned() {
  const int rank = group_->getRank();
  for (size_t i = 0; i < held_.size(); ++i) {
    const Held& h = held_[i];
    if (h.owner != rank || !h.param.grad().defined()) continue;  // as libtorch: no grad, no step
    const torch::Tensor grad = h.param.grad().contiguous();
    DDPX_CHECK(grad.scalar_type() == h.param.scalar_type(), ErrorKind::kUsage,
               "parameter #{} is {} but its gradient is {}; the sharded SGD step needs them alike",
               i, c10::toString(h.param.scalar_type()), c10::toString(grad.scalar_type()));
    auto run = [&](auto* param) {
      using T = std::remove_pointer_t<decltype(param)>;
      T* momentum = h.momentum.defined() ? h.momentum.data_ptr<T>() : nullptr;
      sgd_update<T>(grad.data_ptr<T>(), param, momentum, h.param.numel(), hyper(h), &param,
                    &momentum, 1);
    };
    if (h.param.scalar_type() == torch::kFloat32)
      run(h.param.data_ptr<float>());
    else
      run(h.param.data_ptr<double>());
  }
}

SgdHyper ShardedSgd::hyper(const Held& h) const {
  return SgdHyper::of(
      static_cast<const torch::optim::SGDOptions&>(sgd_.param_groups()[h.group].options()));
}

}  // namespace ddpx::parallel
