// ShardSampler (data/shard_sampler.h): on 2, 3 and 4 ranks, with shards of unequal sizes and a
// shard count that does not divide by the ranks (webdataset#225's hang), every rank gets the
// same number of samples, the epoch reads every sample once plus fewer than `world` repeats,
// a rank reads mostly its own shards, and the order moves with the epoch and nothing else.
#include "data/shard_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

// shard_of for shards of these sizes, samples numbered shard after shard.
std::vector<int32_t> shards_of(const std::vector<int>& sizes) {
  std::vector<int32_t> out;
  for (size_t s = 0; s < sizes.size(); ++s)
    out.insert(out.end(), sizes[s], static_cast<int32_t>(s));
  return out;
}

std::vector<std::vector<int64_t>> all_ranks(const std::vector<int32_t>& shard_of, int world,
                                            int64_t epoch, bool drop_last = false) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    SamplerOptions o;
    o.rank = r;
    o.world_size = world;
    o.seed = 3;
    o.drop_last = drop_last;
    out.push_back(ShardSampler(shard_of, o).indices(epoch));
  }
  return out;
}

TEST(ShardSamplerTest, EveryRankGetsTheSameCountAndTheEpochReadsEverySampleOnce) {
  for (const std::vector<int>& sizes :
       {std::vector<int>{10, 10, 10, 10, 3}, {40, 7, 7}, {5}, {1, 1, 1, 1, 1, 1, 1}, {9, 9}}) {
    const auto shard_of = shards_of(sizes);
    const int64_t n = static_cast<int64_t>(shard_of.size());
    for (int world : {2, 3, 4}) {
      for (int64_t epoch : {0, 1}) {
        const auto ranks = all_ranks(shard_of, world, epoch);
        const int64_t each = (n + world - 1) / world;
        std::map<int64_t, int> seen;
        for (const auto& r : ranks) {
          EXPECT_EQ(static_cast<int64_t>(r.size()), each)
              << sizes.size() << " shards, world " << world << ": unequal ranks hang DDP";
          for (int64_t i : r) ++seen[i];
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "every sample read";
        int repeats = 0;
        for (const auto& [i, count] : seen) repeats += count - 1;
        EXPECT_EQ(repeats, each * world - n) << "only the padding repeats";
        EXPECT_LT(repeats, world);
      }
    }
  }
}

TEST(ShardSamplerTest, ARankReadsItsOwnShardsAndTheOrderMovesWithTheEpochOnly) {
  const auto shard_of = shards_of({100, 100, 100, 100, 100, 60});
  const auto e0 = all_ranks(shard_of, 2, 0), again = all_ranks(shard_of, 2, 0);
  EXPECT_EQ(e0, again) << "the same on every call: every rank computes the same plan";
  EXPECT_NE(e0, all_ranks(shard_of, 2, 1)) << "shuffled per epoch";
  for (const auto& r : e0) {
    std::set<int32_t> shards;
    for (int64_t i : r) shards.insert(shard_of[i]);
    // 560 samples on 2 ranks: 3 shards dealt to each (300 and 260), 20 moved across.
    EXPECT_LE(shards.size(), 4u) << "a rank reads its shards, plus one it borrows from";
    std::vector<int64_t> sorted = r;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_NE(sorted, r) << "the samples within a rank's shards are shuffled";
  }
  std::set<int32_t> a, b;
  for (int64_t i : e0[0]) a.insert(shard_of[i]);
  const auto e7 = all_ranks(shard_of, 2, 7);
  for (int64_t i : e7[0]) b.insert(shard_of[i]);
  EXPECT_NE(a, b) << "a rank's shards change with the epoch";
}

TEST(ShardSamplerTest, DropLastTruncatesEvenlyAndTheDeterministicModeIsRefused) {
  const auto shard_of = shards_of({10, 10, 3});
  const auto ranks = all_ranks(shard_of, 2, 0, /*drop_last=*/true);
  std::set<int64_t> seen;
  for (const auto& r : ranks) {
    EXPECT_EQ(r.size(), 11u);
    seen.insert(r.begin(), r.end());
  }
  EXPECT_EQ(seen.size(), 22u) << "no repeats, one sample left out";
  SamplerOptions o;
  o.world_size = 2;
  o.block = 4;
  const std::string m = test::usage_error([&] { ShardSampler(shard_of, o); });
  EXPECT_TRUE(test::has(m, "--deterministic is not available with --dataset shards")) << m;
  o.block = 0;
  EXPECT_TRUE(test::has(ShardSampler(shard_of, o).describe(),
                        "shards: 3 over 2 rank(s), 12 samples each an epoch: every one of the 23 "
                        "once, 1 repeated to even the ranks"))
      << ShardSampler(shard_of, o).describe();
}

}  // namespace
}  // namespace ddpx::data
