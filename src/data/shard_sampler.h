// Which samples of a set of tar shards (data/shard_dataset.h) each rank reads, so that every rank
// gets the same number of samples, hence of batches, whatever the shards' sizes and count
// (webdataset#225: ranks given whole shards of unequal sizes ran different numbers of steps and
// DDP hung on the collective the short rank never joined). Each epoch the shards are shuffled
// by (seed, epoch) and dealt, in that order, each to the rank holding the fewest samples so far,
// so a rank reads mostly its own shards. Every rank then takes exactly ceil(N / world) samples
// (floor with drop_last): a rank dealt more hands the last ones of its last shard to the ranks
// short of that, in rank order, and only the remainder (fewer than world samples) is made up by
// repeating a rank's first samples, as DistributedSampler pads. An epoch thus reads every sample
// exactly once, plus those few repeats. A rank's samples are shuffled by (seed, epoch, rank). The
// plan is computed alike on every rank from the same inputs; no rank talks to another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sampler.h"

namespace ddpx::data {

class ShardSampler : public Sampler {
 public:
  // shard_of[i]: the shard of sample i (data/image_dataset.h's ImageFiles::shards).
  // options.block (the deterministic mode's runs) is not supported and must be 0.
  ShardSampler(std::vector<int32_t> shard_of, SamplerOptions options);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t num_samples() const override { return num_samples_; }

  // The start-up line: shards, ranks, samples a rank and how many an epoch repeats.
  std::string describe() const;

 private:
  // Every rank's samples in `epoch`, before the shuffle and the padding.
  std::vector<std::vector<int64_t>> plan(int64_t epoch) const;

  std::vector<std::vector<int64_t>> shards_;  // the samples of each shard, in order
  SamplerOptions options_;
  int64_t total_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace ddpx::data
