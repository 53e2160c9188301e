// One unit of a sharded plan (see shard_unit.h).
#include "parallel/sharded/shard_unit.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/shm/shm_allreduce.h"
#include "distributed/shm/shm_backend.h"
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
                     const ScratchPool::Allocate& place, ScratchPool* scratch)
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
    aliases_.push_back(alias(p.storage(), 0, p.sizes(), options));
  }
  if (place && options.device().is_cpu()) flat_ = place(total, params_[0].scalar_type());
  if (!flat_.defined()) flat_ = torch::empty({total}, options);
  gather_dtype_ = flat_.scalar_type();
  grad_flat_ = torch::zeros({total}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto shard = alias(flat_.storage(), offsets_[i], shapes_[i].shard_sizes, options);
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

void ShardUnit::shard_from_params() {
  DDPX_CHECK(gathered_, ErrorKind::kInternal, "unit {} is sharded from released parameters", name_);
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
    materialize(i);
    aliases_[i].copy_(p.detach());
    p.set_data(aliases_[i]);
  }
}

void ShardUnit::materialize(size_t i) { materialize_storage(params_[i], nbytes_[i]); }

void ShardUnit::release() {
  if (gather_work_) finish_gather();  // never leave a collective writing into freed memory
  for (auto& p : params_) free_storage(p);
  gathered_ = false;
}

void ShardUnit::set_gather_dtype(c10::ScalarType dtype) {
  if (!c10::isFloatingType(flat_.scalar_type()) || !c10::isFloatingType(dtype)) return;
  gather_dtype_ = dtype;
}

void ShardUnit::start_gather(c10d::ProcessGroup& group, bool full_precision) {
  const bool full = full_precision || gather_dtype_ == flat_.scalar_type();
  if (gather_work_ && full && !pending_full_) finish_gather();  // then again, in full
  if (gather_work_) return;
  if (gathered_ && (gathered_full_ || !full)) return;
  if (in_place_ != nullptr && full) return start_gather_in_place(group);
  const auto dtype = full ? flat_.scalar_type() : gather_dtype_;
  gather_input_ = dtype == flat_.scalar_type() ? flat_ : flat_.to(dtype);
  gather_buffer_ = scratch(world_ * flat_.numel(), dtype);
  pending_full_ = full;
  gather_work_ = group._allgather_base(gather_buffer_, gather_input_);
}

bool ShardUnit::shards_in(const dist::ShmBackend& shm) const {
  const auto& arena = shm.arena();
  return arena != nullptr && flat_.device().is_cpu() &&
         arena->locate(flat_.data_ptr(), flat_.numel() * flat_.element_size()).has_value();
}

void ShardUnit::start_gather_in_place(c10d::ProcessGroup& group) {
  for (size_t i = 0; i < params_.size(); ++i) materialize(i);  // here, not on the comm thread
  // What the copy needs, by value: the op runs on the transport's thread.
  struct Piece {
    char* to;
    int64_t from, row_bytes, rows_per_rank;
    std::vector<int64_t> rows;  // real rows of each rank
  };
  std::vector<Piece> pieces;
  const int64_t size = flat_.element_size();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& s = shapes_[i];
    Piece piece{static_cast<char*>(aliases_[i].data_ptr()),
                offsets_[i] * size,
                s.row_numel * size,
                s.rows_per_rank,
                {}};
    for (int q = 0; q < world_; ++q) piece.rows.push_back(s.real_rows(q));
    pieces.push_back(std::move(piece));
  }
  pending_full_ = true;
  const auto logical = torch::empty({world_ * flat_.numel()}, flat_.options().device(torch::kMeta));
  gather_work_ = dist::submit_shm(
      group, *in_place_, "allgather_into_tensor", {logical},
      [flat = flat_, pieces = std::move(pieces)](dist::ShmAllreduce& shm) {
        shm.gather_apply(flat, [&](const std::vector<const void*>& sources) {
          for (const auto& p : pieces) {
            for (size_t q = 0; q < sources.size(); ++q) {
              if (p.rows[q] == 0) continue;
              std::memcpy(p.to + q * p.rows_per_rank * p.row_bytes,
                          static_cast<const char*>(sources[q]) + p.from, p.rows[q] * p.row_bytes);
            }
          }
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
  const auto rows = gathered.view({world_, flat_.numel()});
  for (size_t i = 0; i < params_.size(); ++i) {
    materialize(i);
    const auto& s = shapes_[i];
    auto full = aliases_[i].view({-1});
    for (int q = 0; q < world_; ++q) {
      const int64_t n = s.real_rows(q) * s.row_numel;
      if (n == 0) continue;
      full.narrow(0, q * s.rows_per_rank * s.row_numel, n).copy_(rows[q].narrow(0, offsets_[i], n));
    }
  }
}

torch::Tensor ShardUnit::scratch(int64_t numel, c10::ScalarType dtype) {
  if (scratch_) return scratch_->acquire(numel, dtype, flat_.device());
  return torch::empty({numel}, flat_.options().dtype(dtype));
}

void ShardUnit::give_back(torch::Tensor& buffer) {
  if (scratch_) scratch_->release(buffer);
  buffer = torch::Tensor();
}

torch::Tensor ShardUnit::pack_gradients(bool free_full, torch::Tensor into) {
  auto packed = into.defined() ? into : torch::empty({world_ * flat_.numel()}, flat_.options());
  auto rows = packed.view({world_, flat_.numel()});
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
  reduce_input_ = pack_gradients(free_full, scratch(world_ * flat_.numel(), flat_.scalar_type()));
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
  grad_flat_.copy_(tree_sum(output.view({world_, flat_.numel()}).unbind(0)));
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
  auto input = torch::empty({flat_.numel()}, local[0].options().requires_grad(false));
  for (size_t i = 0; i < local.size(); ++i) {
    input.narrow(0, offsets_[i], shapes_[i].shard_numel()).copy_(local[i].reshape({-1}));
  }
  auto output = torch::empty({world_ * flat_.numel()}, input.options());
  dist::wait_work(group._allgather_base(output, input),
                  fmt::format("the all-gather of unit '{}''s state", name_));
  const auto rows = output.view({world_, flat_.numel()});
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

}  // namespace ddpx::parallel
