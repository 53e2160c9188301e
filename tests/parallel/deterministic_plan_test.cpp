// The deterministic plan's sum: a fixed binary tree, so that ranks' partial sums of whole
// subtrees add up to the very bits of one process's sum over every atom, where a left-to-right
// sum (an all-reduce's order on another world size) gives other bits.
#include "parallel/data/deterministic_plan.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace ddpx::parallel {
namespace {

TEST(DeterministicPlanTest, RanksSubtreeSumsGiveOneProcesssBitsWhereALeftToRightSumDoesNot) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> atoms;
  for (int i = 0; i < 8; ++i) atoms.push_back(torch::randn({4096}) * std::pow(10.0, i % 4));
  const auto one = tree_sum(atoms);
  for (int world : {2, 4, 8}) {
    std::vector<torch::Tensor> ranks;
    const int per_rank = 8 / world;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(tree_sum(std::vector<torch::Tensor>(atoms.begin() + r * per_rank,
                                                          atoms.begin() + (r + 1) * per_rank)));
    }
    EXPECT_TRUE(tree_sum(ranks).equal(one)) << "world " << world;
  }
  auto left = atoms[0].clone();
  for (int i = 1; i < 8; ++i) left.add_(atoms[i]);
  EXPECT_FALSE(left.equal(one));  // the order matters: the test can tell
  EXPECT_TRUE(left.allclose(one, 1e-5, 1e-3));
}

}  // namespace
}  // namespace ddpx::parallel
