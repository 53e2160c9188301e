// Per-parameter dim-0 sharding (see shard_layout.h).
#include "parallel/sharded/shard_layout.h"

#include <algorithm>

namespace ddpx::parallel {

int64_t ShardShape::real_rows(int rank) const {
  return std::clamp<int64_t>(rows - rank * rows_per_rank, 0, rows_per_rank);
}

ShardShape shard_shape(const torch::Tensor& param, int world_size) {
  ShardShape s;
  s.rows = param.dim() == 0 ? 1 : param.size(0);
  s.row_numel = s.rows == 0 ? 0 : param.numel() / s.rows;
  s.rows_per_rank = (s.rows + world_size - 1) / world_size;
  s.shard_sizes = {s.rows_per_rank};
  for (int64_t d = 1; d < param.dim(); ++d) s.shard_sizes.push_back(param.size(d));
  return s;
}

void copy_rows_of(const torch::Tensor& full, const ShardShape& shape, int rank,
                  torch::Tensor& flat) {
  const int64_t n = shape.real_rows(rank) * shape.row_numel;
  const auto src = full.reshape({-1});
  if (n > 0) {
    flat.narrow(0, 0, n).copy_(src.narrow(0, rank * shape.rows_per_rank * shape.row_numel, n));
  }
  if (n < flat.numel()) flat.narrow(0, n, flat.numel() - n).zero_();
}

torch::Tensor take_shard(const torch::Tensor& full, const ShardShape& shape, int rank) {
  auto flat = torch::empty({shape.shard_numel()}, full.options().requires_grad(false));
  copy_rows_of(full.detach(), shape, rank, flat);
  return flat.view(shape.shard_sizes);
}

void put_shard(torch::Tensor& full, const ShardShape& shape, int rank, const torch::Tensor& shard) {
  const int64_t n = shape.real_rows(rank) * shape.row_numel;
  if (n == 0) return;
  full.view({-1})
      .narrow(0, rank * shape.rows_per_rank * shape.row_numel, n)
      .copy_(shard.reshape({-1}).narrow(0, 0, n));
}

}  // namespace ddpx::parallel
