// A plan's evaluation as the trainer runs it (parallel/plan.h): the share of the test set a rank
// reads is its replica's, and forward_eval() gives the logits on the one rank of the replica that
// counts them, nothing on the others. Shared by the pipeline and tensor-parallel plan tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "parallel/plan.h"

namespace ddpx::test {

inline void expect_replica_evaluation(parallel::Plan& plan, int rank, int world_size, int replica,
                                      int replicas, bool counts, const torch::Tensor& input,
                                      const std::function<void(const torch::Tensor&)>& check) {
  const auto share = plan.eval_share(rank, world_size);
  EXPECT_EQ(share.rank, replica) << "rank " << rank;
  EXPECT_EQ(share.count, replicas) << "rank " << rank;
  plan.set_training(false);
  torch::Tensor logits = plan.forward_eval(input);
  plan.set_training(true);
  if (counts) {
    ASSERT_TRUE(logits.defined()) << "rank " << rank;
    check(logits);
  } else {
    EXPECT_FALSE(logits.defined()) << "rank " << rank;
  }
}

}  // namespace ddpx::test
