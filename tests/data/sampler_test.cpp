// DistributedSampler against torch.utils.data.DistributedSampler, and exact eval splits.
#include "data/sampler.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "support/support.h"

namespace ddpx::data {
namespace {

struct Config {
  int64_t n, world;
  bool shuffle, drop_last;
  uint64_t seed;
  int64_t epoch;
};

TEST(SamplerTest, MatchesPyTorchDistributedSampler) {
  const std::vector<Config> configs = {
      {10, 3, true, false, 0, 0},     {10, 3, true, false, 0, 1},  {10, 3, true, true, 42, 3},
      {7, 4, false, false, 0, 0},     {7, 4, false, true, 0, 0},   {2, 5, true, false, 5, 2},
      {1000, 8, true, false, 123, 7}, {60000, 3, true, true, 0, 0}};
  std::string script = "import torch\nfrom torch.utils.data import DistributedSampler\n";
  for (const auto& c : configs)
    for (int64_t r = 0; r < c.world; ++r)
      script += fmt::format(
          "s = DistributedSampler(range({}), num_replicas={}, rank={}, shuffle={}, seed={}, "
          "drop_last={}); s.set_epoch({}); print(' '.join(map(str, s)))\n",
          c.n, c.world, r, c.shuffle ? "True" : "False", c.seed, c.drop_last ? "True" : "False",
          c.epoch);
  auto result = test::run_python(script);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::istringstream lines(result.output);
  for (const auto& c : configs) {
    for (int64_t r = 0; r < c.world; ++r) {
      std::string line;
      ASSERT_TRUE(std::getline(lines, line));
      DistributedSampler sampler(c.n, {r, c.world, c.shuffle, c.drop_last, c.seed});
      auto ours = sampler.indices(c.epoch);
      EXPECT_EQ(static_cast<int64_t>(ours.size()), sampler.num_samples());
      EXPECT_EQ(fmt::format("{}", fmt::join(ours, " ")), line)
          << "n=" << c.n << " world=" << c.world << " rank=" << r << " epoch=" << c.epoch;
    }
  }
}

TEST(SamplerTest, ShardsCoverTheDatasetAndDifferByEpoch) {
  const int64_t n = 103, world = 4;
  std::set<int64_t> seen;
  for (int64_t r = 0; r < world; ++r) {
    DistributedSampler sampler(n, {r, world, true, false, 0});
    for (int64_t i : sampler.indices(0)) seen.insert(i);
    EXPECT_NE(sampler.indices(0), sampler.indices(1));
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
}

// The deterministic mode's blocks: global batch j holds the same samples in the same order on
// 1, 2 and 4 ranks (rank r's run of each global batch is the r-th), padded to whole batches.
TEST(SamplerTest, BlocksMakeEveryGlobalBatchTheSameOnAnyWorldSize) {
  const int64_t n = 103, global = 16;
  for (bool drop_last : {false, true}) {
    SamplerOptions one_rank{0, 1, true, drop_last, 7};
    one_rank.block = global;
    const auto whole = DistributedSampler(n, one_rank).indices(2);
    EXPECT_EQ(static_cast<int64_t>(whole.size()), drop_last ? 96 : 112);
    for (int64_t world : {2, 4}) {
      const int64_t block = global / world;
      std::vector<std::vector<int64_t>> ranks;
      for (int64_t r = 0; r < world; ++r) {
        SamplerOptions o{r, world, true, drop_last, 7};
        o.block = block;
        DistributedSampler sampler(n, o);
        ranks.push_back(sampler.indices(2));
        EXPECT_EQ(static_cast<int64_t>(ranks.back().size()), sampler.num_samples());
      }
      std::vector<int64_t> joined;  // global batch after global batch, rank after rank
      for (size_t start = 0; start < ranks[0].size(); start += block)
        for (const auto& mine : ranks)
          joined.insert(joined.end(), mine.begin() + start, mine.begin() + start + block);
      EXPECT_EQ(joined, whole) << "world " << world << " drop_last " << drop_last;
    }
  }
}

TEST(SamplerTest, EvalCountsEachSampleOnce) {
  for (int64_t world : {1, 3, 7}) {
    std::vector<int> count(50, 0);
    for (int64_t r = 0; r < world; ++r)
      for (int64_t i : eval_indices(50, r, world)) ++count.at(i);
    for (int c : count) EXPECT_EQ(c, 1) << "world " << world;
  }
}

}  // namespace
}  // namespace ddpx::data
