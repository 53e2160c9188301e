// How one parameter is split across the ranks of a sharded plan, as FSDP2's per-parameter
// sharding does it: along dim 0, every rank holding ceil(rows / world) rows, the last ranks'
// shards padded with zero rows where the rows do not divide (a 0-dim parameter counts as one
// row). A rank's shard is an ordinary tensor of shape (rows_per_rank, rest...), so any
// torch::optim optimizer steps it as it would the whole parameter.
//
// A unit's parameters travel together: their shards lie one after another in the unit's flat
// shard buffer (`offset` is a parameter's start there), so one all-gather brings a unit's
// parameters and one reduce-scatter its gradients. In the gathered buffer, rank q's row holds
// rank q's shards: row q, [offset, offset + shard_numel) are rows [q * rows_per_rank, ...) of
// the parameter.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::parallel {

struct ShardShape {
  int64_t rows = 1;                  // dim 0 of the parameter (1 for a 0-dim one)
  int64_t rows_per_rank = 1;         // ceil(rows / world)
  int64_t row_numel = 1;             // elements per row (product of the other dims)
  std::vector<int64_t> shard_sizes;  // (rows_per_rank, rest...)

  int64_t shard_numel() const { return rows_per_rank * row_numel; }
  // The rows of the parameter that rank `rank` holds (the rest of its shard is padding).
  int64_t real_rows(int rank) const;
};

ShardShape shard_shape(const torch::Tensor& param, int world_size);

// This rank's shard of `full` (a new tensor, zero padded), in `full`'s dtype and device.
torch::Tensor take_shard(const torch::Tensor& full, const ShardShape& shape, int rank);

// Writes rank q's shard `shard` (shard_numel elements, flat) into `full` (contiguous), dropping
// the padding.
void put_shard(torch::Tensor& full, const ShardShape& shape, int rank, const torch::Tensor& shard);

// Copies `full`'s rows of rank q into `flat` (shard_numel elements), zero padding after.
void copy_rows_of(const torch::Tensor& full, const ShardShape& shape, int rank,
                  torch::Tensor& flat);

}  // namespace ddpx::parallel
