// Cutting a whole parameter into tensor-parallel pieces and joining them back (see shard_spec.h).
#include "parallel/tensor/shard_spec.h"

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"

namespace ddpx::parallel::tensor {

torch::Tensor take_shard(const torch::Tensor& whole_tensor, const ShardSpec& spec, int rank,
                         int ranks) {
  torch::Tensor whole = whole_tensor;
  if (spec.pad > 0) {
    auto shape = whole.sizes().vec();
    shape[static_cast<size_t>(spec.dim)] = spec.pad;
    whole = torch::cat({whole, torch::zeros(shape, whole.options())}, spec.dim);
  }
  const int64_t size = whole.size(spec.dim);
  DDPX_CHECK(size % (spec.parts * ranks) == 0, ErrorKind::kInternal,
             "tensor parallel: a size of {} along dimension {} does not split into {} x {} pieces",
             size, spec.dim, spec.parts, ranks);
  const int64_t part = size / spec.parts, piece = part / ranks;
  std::vector<torch::Tensor> mine;
  for (int64_t p = 0; p < spec.parts; ++p) {
    mine.push_back(whole.narrow(spec.dim, p * part + rank * piece, piece));
  }
  return torch::cat(mine, spec.dim).contiguous();
}

torch::Tensor join_shards(const std::vector<torch::Tensor>& pieces, const ShardSpec& spec) {
  // Each piece holds `parts` blocks; the whole is block 0 of every rank, then block 1, ...
  std::vector<std::vector<torch::Tensor>> blocks;
  for (const auto& piece : pieces) blocks.push_back(piece.chunk(spec.parts, spec.dim));
  std::vector<torch::Tensor> ordered;
  for (int64_t p = 0; p < spec.parts; ++p) {
    for (const auto& b : blocks) ordered.push_back(b[p]);
  }
  torch::Tensor joined = torch::cat(ordered, spec.dim);
  return spec.pad > 0 ? joined.narrow(spec.dim, 0, joined.size(spec.dim) - spec.pad).contiguous()
                      : joined;
}

torch::Tensor gather_whole(const torch::Tensor& piece, const ShardSpec& spec,
                           dist::Context& group) {
  if (!group.distributed()) return piece.clone();
  torch::NoGradGuard no_grad;
  // One all-gather into a flat buffer: rank r's piece at rows [r * n, (r + 1) * n).
  auto flat = piece.detach().contiguous().view({-1});
  const int ranks = group.world_size();
  auto gathered = torch::empty({ranks * flat.numel()}, flat.options());
  dist::wait_work(group.process_group()->_allgather_base(gathered, flat),
                  "the all-gather of a tensor-parallel parameter");
  std::vector<torch::Tensor> pieces;
  for (const auto& chunk : gathered.chunk(ranks)) pieces.push_back(chunk.view(piece.sizes()));
  return join_shards(pieces, spec);
}

}  // namespace ddpx::parallel::tensor
