// One unit of a sharded plan (see shard_unit.h).
#include "parallel/sharded/shard_unit.h"

#include <fmt/format.h>

#include <cstring>

#include "core/env.h"
#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/peer_memory.h"
#include "parallel/data/atoms.h"
#include "parallel/storage.h"

namespace ddpx::parallel {
namespace {

// A tensor over `storage` from element `offset`, contiguous, with a version counter of its own
// (not a view in autograd's sense).
torch::Tensor alias(const c10::Storage& storage, int64_t offset, c10::IntArrayRef sizes,
                    const torch::TensorOptions& options) {
  return torch::empty({0}, options.requires_grad(false)).set_(storage, offset, sizes);
}

}  // namespace

ShardUnit::ShardUnit(std::string name, std::vector<torch::Tensor> params,
                     std::vector<std::string> names, int rank, int world_size,
                     const ScratchPool::Allocate& place, ScratchPool* scratch, bool resident)
    : name_(std::move(name)),
      rank_(rank),
      world_(world_size),
      params_(std::move(params)),
      names_(std::move(names)),
      scratch_(scratch) {
  DDPX_CHECK(!params_.empty(), ErrorKind::kInternal, "shard unit {} has no parameters", name_);
  const auto options = params_[0].options().requires_grad(false);
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    DDPX_CHECK(p.scalar_type() == params_[0].scalar_type() && p.device() == params_[0].device(),
               ErrorKind::kUsage,
               "sharding: unit '{}' mixes {} on {} ({}) with {} on {} ({}); put parameters of "
               "another dtype or device in a unit of their own",
               name_, c10::toString(params_[0].scalar_type()), params_[0].device().str(), names_[0],
               c10::toString(p.scalar_type()), p.device().str(), names_[i]);
    DDPX_CHECK(p.is_contiguous() && p.storage_offset() == 0 &&
                   p.storage().nbytes() == static_cast<size_t>(p.numel()) * p.element_size(),
               ErrorKind::kInternal, "sharding: parameter {} does not own its storage", names_[i]);
    shapes_.push_back(shard_shape(p, world_));
    offsets_.push_back(total);
    nbytes_.push_back(p.storage().nbytes());
    total += shapes_.back().shard_numel();
  }
  total_ = total;
  dtype_ = params_[0].scalar_type();
  gather_dtype_ = dtype_;
  const bool on_cpu = options.device().is_cpu();
  if (resident && place && on_cpu) storage_ = place(world_ * total, dtype_);
  resident_ = storage_.defined();
  if (resident_) {
    // Each parameter moves into its padded rows of the buffer; the padding stays zero, as a
    // flat buffer's does.
    torch::NoGradGuard no_grad;
    storage_.zero_();
    for (size_t i = 0; i < params_.size(); ++i) {
      auto region = alias(storage_.storage(), storage_.storage_offset() + resident_offset(i),
                          params_[i].sizes(), options);
      region.copy_(params_[i].detach());
      params_[i].set_data(region);
    }
  } else {
    if (place && on_cpu) flat_ = place(total, dtype_);
    if (!flat_.defined()) flat_ = torch::empty({total}, options);
  }
  for (const auto& p : params_)
    aliases_.push_back(alias(p.storage(), p.storage_offset(), p.sizes(), options));
  grad_flat_ = torch::zeros({total}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto shard = resident_ ? alias(storage_.storage(),
                                   storage_.storage_offset() + resident_offset(i) +
                                       rank_ * shapes_[i].shard_numel(),
                                   shapes_[i].shard_sizes, options)
                           : alias(flat_.storage(), offsets_[i], shapes_[i].shard_sizes, options);
    shard.set_requires_grad(params_[i].requires_grad());  // a frozen parameter stays frozen
    shards_.push_back(shard);
    shard_grads_.push_back(
        alias(grad_flat_.storage(), offsets_[i], shapes_[i].shard_sizes, options));
  }
  shard_from_params();
}

int64_t ShardUnit::param_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : params_) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

int64_t ShardUnit::held_bytes() const {
  return resident_ ? storage_.numel() * static_cast<int64_t>(storage_.element_size())
                   : param_bytes();
}

void ShardUnit::shard_from_params() {
  DDPX_CHECK(gathered_, ErrorKind::kInternal, "unit {} is sharded from released parameters", name_);
  if (resident_) return;  // the shards are the parameters' own rows (restore_storage: see there)
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto flat = flat_.narrow(0, offsets_[i], shapes_[i].shard_numel());
    copy_rows_of(aliases_[i], shapes_[i], rank_, flat);
  }
}

void ShardUnit::restore_storage() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (p.storage().unsafeGetStorageImpl() == aliases_[i].storage().unsafeGetStorageImpl())
      continue;
    // The unit's own storage (the alias's), not the one `p` was given: a loaded archive's
    // parameters may share one storage, which holds more than this parameter's bytes and whose
    // other parameters are still to be copied (a ZeRO-1/2 state_dict, whose parameters are rows
    // of one buffer).
    if (!resident_) materialize_storage(aliases_[i], nbytes_[i]);
    aliases_[i].copy_(p.detach());
    p.set_data(aliases_[i]);
  }
}

void ShardUnit::materialize(size_t i) { materialize_storage(params_[i], nbytes_[i]); }

void ShardUnit::release() {
  DDPX_CHECK(!resident_, ErrorKind::kInternal, "unit {} keeps its parameters resident", name_);
  if (gather_work_) finish_gather();  // never leave a collective writing into freed memory
  for (auto& p : params_) free_storage(p);
  gathered_ = false;
}

void ShardUnit::set_gather_dtype(c10::ScalarType dtype) {
  if (!c10::isFloatingType(dtype_) || !c10::isFloatingType(dtype)) return;
  // A resident unit's own rows are its fp32 shards: a low-precision gather would round them.
  DDPX_CHECK(!resident_ || dtype == dtype_, ErrorKind::kInternal,
             "unit {} keeps its parameters resident and gathers in {} only", name_,
             c10::toString(dtype_));
  gather_dtype_ = dtype;
}

void ShardUnit::start_gather(c10d::ProcessGroup& group, bool full_precision) {
  const bool full = full_precision || gather_dtype_ == dtype_;
  if (gather_work_ && full && !pending_full_) finish_gather();  // then again, in full
  if (gather_work_) return;
  if (gathered_ && (gathered_full_ || !full)) return;
  if (in_place_ != nullptr && full) return start_gather_in_place(group);
  const auto dtype = full ? dtype_ : gather_dtype_;
  gather_input_ = local_flat(dtype);
  gather_buffer_ = scratch(world_ * total_, dtype);
  pending_full_ = full;
  gather_work_ = group._allgather_base(gather_buffer_, gather_input_);
}

torch::Tensor ShardUnit::local_flat(c10::ScalarType dtype) const {
  if (!resident_) return dtype == dtype_ ? flat_ : flat_.to(dtype);
  torch::NoGradGuard no_grad;
  auto flat = torch::empty({total_}, grad_flat_.options().dtype(dtype));
  for (size_t i = 0; i < shards_.size(); ++i)
    flat.narrow(0, offsets_[i], shapes_[i].shard_numel()).copy_(shards_[i].reshape({-1}));
  return flat;
}

bool ShardUnit::shards_in(const dist::PeerMemory& memory) const {
  return memory.offset_of(published()).has_value();
}

void ShardUnit::start_gather_in_place(c10d::ProcessGroup& group) {
  // Memory for released parameters (a resident unit is never released), here, not on the
  // comm thread.
  if (!resident_)
    for (size_t i = 0; i < params_.size(); ++i) materialize(i);
  // What the copy needs, by value: the op runs on the transport's thread. Rank q's real rows of
  // each parameter, from where rank q publishes them to where this rank's parameter holds them:
  // a flat buffer's shards at the same offset on every rank, a resident unit's rows at their own
  // place in every rank's buffer (this rank's own rows are its shards already).
  struct Copy {
    char* to;
    int rank;
    int64_t from, bytes;
  };
  std::vector<Copy> copies;
  const int64_t size = static_cast<int64_t>(c10::elementSize(dtype_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& s = shapes_[i];
    for (int q = 0; q < world_; ++q) {
      const int64_t bytes = s.real_rows(q) * s.row_numel * size;
      if (bytes == 0 || (resident_ && q == rank_)) continue;
      const int64_t rows_at = q * s.rows_per_rank * s.row_numel * size;  // in the parameter
      const int64_t from = resident_ ? resident_offset(i) * size + rows_at : offsets_[i] * size;
      copies.push_back({static_cast<char*>(aliases_[i].data_ptr()) + rows_at, q, from, bytes});
    }
  }
  pending_full_ = true;
  const auto logical = torch::empty({world_ * total_}, grad_flat_.options().device(torch::kMeta));
  gather_work_ = dist::submit_steps(
      group, *in_place_, "allgather_into_tensor", {logical},
      [published = published(), copies = std::move(copies)](dist::PeerSteps& steps) {
        steps.gather_apply(published, [&](const std::vector<const void*>& sources) {
          for (const auto& c : copies)
            std::memcpy(c.to, static_cast<const char*>(sources[c.rank]) + c.from, c.bytes);
        });
      });
}

void ShardUnit::finish_gather() {
  if (!gather_work_) return;
  auto work = std::move(gather_work_);
  dist::wait_work(work, fmt::format("the all-gather of sharded unit '{}'", name_));
  if (gather_buffer_.defined()) {  // else gathered in place
    copy_out(gather_buffer_);      // widens a low-precision gather back to the parameters' dtype
    give_back(gather_buffer_);
  }
  gather_input_ = torch::Tensor();
  gathered_ = true;
  gathered_full_ = pending_full_;
}

void ShardUnit::gather(c10d::ProcessGroup& group) {
  start_gather(group);
  finish_gather();
}

void ShardUnit::copy_out(const torch::Tensor& gathered) {
  torch::NoGradGuard no_grad;
  const auto rows = gathered.view({world_, total_});
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!resident_) materialize(i);
    const auto& s = shapes_[i];
    auto full = aliases_[i].view({-1});
    for (int q = 0; q < world_; ++q) {
      const int64_t n = s.real_rows(q) * s.row_numel;
      if (n == 0 || (resident_ && q == rank_)) continue;  // a resident unit's own: its shards
      full.narrow(0, q * s.rows_per_rank * s.row_numel, n).copy_(rows[q].narrow(0, offsets_[i], n));
    }
  }
}

torch::Tensor ShardUnit::scratch(int64_t numel, c10::ScalarType dtype) {
  if (scratch_) return scratch_->acquire(numel, dtype, grad_flat_.device());
  return torch::empty({numel}, grad_flat_.options().dtype(dtype));
}

void ShardUnit::give_back(torch::Tensor& buffer) {
  if (scratch_) scratch_->release(buffer);
  buffer = torch::Tensor();
}

torch::Tensor ShardUnit::pack_gradients(bool free_full, torch::Tensor into) {
  auto packed = into.defined() ? into : torch::empty({world_ * total_}, grad_flat_.options());
  auto rows = packed.view({world_, total_});
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    for (int q = 0; q < world_; ++q) {
      auto slot = rows[q].narrow(0, offsets_[i], shapes_[i].shard_numel());
      if (grad.defined()) {
        copy_rows_of(grad, shapes_[i], q, slot);
      } else {
        slot.zero_();
      }
    }
    if (free_full) params_[i].mutable_grad() = torch::Tensor();
  }
  return packed;
}

void ShardUnit::start_reduce(c10d::ProcessGroup& group, bool free_full, bool group_averages) {
  if (reduce_work_) return;
  torch::NoGradGuard no_grad;
  reduce_input_ = pack_gradients(free_full, scratch(world_ * total_, dtype_));
  c10d::ReduceScatterOptions options;
  options.reduceOp = group_averages ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
  reduce_averaged_ = group_averages;
  reduce_work_ = group._reduce_scatter_base(grad_flat_, reduce_input_, options);
}

void ShardUnit::finish_reduce() {
  if (!reduce_work_) return;
  auto work = std::move(reduce_work_);
  dist::wait_work(work, fmt::format("the reduce-scatter of sharded unit '{}'", name_));
  give_back(reduce_input_);
  torch::NoGradGuard no_grad;
  if (!reduce_averaged_) grad_flat_.div_(world_);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad()) shards_[i].mutable_grad() = shard_grads_[i];
  }
}

void ShardUnit::reduce_in_tree(c10d::ProcessGroup& group, int64_t atoms, bool free_full) {
  torch::NoGradGuard no_grad;
  auto input = pack_gradients(free_full);
  auto output = torch::empty_like(input);
  std::vector<int64_t> equal_splits;  // empty: world_ equal rows
  dist::wait_work(
      group.alltoall_base(output, input, equal_splits, equal_splits),
      fmt::format("--deterministic: the all-to-all of sharded unit '{}''s gradients", name_));
  grad_flat_.copy_(tree_sum(output.view({world_, total_}).unbind(0)));
  grad_flat_.div_(static_cast<double>(atoms));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad()) shards_[i].mutable_grad() = shard_grads_[i];
  }
}

std::vector<torch::Tensor> ShardUnit::gather_full(c10d::ProcessGroup& group,
                                                  const std::vector<torch::Tensor>& local) {
  DDPX_CHECK(local.size() == params_.size(), ErrorKind::kInternal,
             "unit {}: {} tensors to gather for {} parameters", name_, local.size(),
             params_.size());
  torch::NoGradGuard no_grad;
  auto input = torch::empty({total_}, local[0].options().requires_grad(false));
  for (size_t i = 0; i < local.size(); ++i) {
    input.narrow(0, offsets_[i], shapes_[i].shard_numel()).copy_(local[i].reshape({-1}));
  }
  auto output = torch::empty({world_ * total_}, input.options());
  dist::wait_work(group._allgather_base(output, input),
                  fmt::format("the all-gather of unit '{}''s state", name_));
  const auto rows = output.view({world_, total_});
  std::vector<torch::Tensor> full;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto whole = torch::empty(params_[i].sizes(), input.options());
    for (int q = 0; q < world_; ++q) {
      put_shard(whole, shapes_[i], q, rows[q].narrow(0, offsets_[i], shapes_[i].shard_numel()));
    }
    full.push_back(whole);
  }
  return full;
}

bool keeps_resident(ShardMode mode, c10::ScalarType gather_dtype, const dist::PeerMemory* memory) {
  return mode != ShardMode::kNone && mode != ShardMode::kFull &&
         gather_dtype == c10::ScalarType::Undefined && memory != nullptr &&
         env::get_or("DDPX_GATHER_IN_PLACE", "1") != "0";
}

bool gather_in_place_if_shared(std::vector<ShardUnit>& units, c10d::ProcessGroup& group,
                               int world_size, dist::PeerMemory* memory) {
  if (memory == nullptr || env::get_or("DDPX_GATHER_IN_PLACE", "1") == "0") return false;
  bool here = !units.empty();
  for (const auto& unit : units) here = here && unit.shards_in(*memory);
  torch::Tensor votes = torch::tensor({int64_t{here}});
  dist::all_reduce_sum(group, votes, "sharded units in peer memory");
  if (votes.item<int64_t>() != world_size) return false;
  for (auto& unit : units) unit.gather_in_place(memory);
  return true;
}

}  // namespace ddpx::parallel
