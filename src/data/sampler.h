// Which samples each rank sees. DistributedSampler follows torch.utils.data.DistributedSampler:
// a permutation seeded by seed + epoch (torch.randperm with a seeded generator), padded by
// repeating from the start (or truncated with drop_last) to a multiple of world_size, and
// rank r takes every world_size-th index starting at r. With `block` B > 0 (the deterministic
// mode) the permutation is cut into global batches of B * world_size indices, padded or
// truncated to whole ones, and rank r takes the r-th run of B in each: a global batch then holds
// the same samples in the same order on any world size. For evaluation, eval_indices splits the
// dataset exactly: every sample is counted once across ranks, with no padding.
#pragma once

#include <cstdint>
#include <vector>

namespace ddpx::data {

struct SamplerOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int64_t block = 0;  // > 0: contiguous runs of this many per rank (see above); 0: interleaved
};

// Which samples a rank takes in an epoch; every rank of a run gets num_samples() of them.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual int64_t num_samples() const = 0;  // per rank, the same every epoch
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, SamplerOptions options);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t num_samples() const override { return num_samples_; }  // per rank

 private:
  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t num_samples_;
};

std::vector<int64_t> eval_indices(int64_t dataset_size, int64_t rank, int64_t world_size);

}  // namespace ddpx::data
