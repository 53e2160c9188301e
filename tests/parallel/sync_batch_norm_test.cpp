// SyncBatchNorm: two ranks, each with half of a batch, must compute what one process computes
// with BatchNorm on the whole batch: outputs, input and weight gradients, running statistics.
#include "parallel/data/sync_batch_norm.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>

#include "distributed/ranks.h"
#include "models/batch_norm.h"

namespace ddpx::dist {
namespace {

using torch::indexing::Slice;

TEST(SyncBatchNormTest, TwoHalvesMatchOneProcessWithTheGlobalBatch) {
  torch::manual_seed(0);
  const auto x = torch::randn({8, 4, 3, 3}) * 3 + 1;  // (B, C, H, W): not already normalized
  const auto upstream = torch::randn({8, 4, 3, 3});   // d loss / d y

  // One process, the whole batch.
  models::BatchNorm reference(4);
  auto x_full = x.clone().requires_grad_(true);
  auto y_full = reference(x_full);
  (y_full * upstream).sum().backward();

  auto errors = test::run_ranks(2, [&](int rank, Context& context) {
    torch::nn::Sequential net(models::BatchNorm(4));
    ASSERT_EQ(parallel::convert_sync_batch_norm(*net, context), 1);
    auto rows = Slice(rank * 4, rank * 4 + 4);
    auto x_half = x.index({rows}).clone().requires_grad_(true);
    auto y = net->forward(x_half);
    (y * upstream.index({rows})).sum().backward();

    EXPECT_TRUE(torch::allclose(y, y_full.index({rows}), 1e-5, 1e-5)) << "rank " << rank;
    EXPECT_TRUE(torch::allclose(x_half.grad(), x_full.grad().index({rows}), 1e-5, 1e-5))
        << "input gradient, rank " << rank;
    auto* bn = net[0]->as<models::BatchNormImpl>();
    // Weight gradients are each rank's share; their sum is the whole batch's (DDP sums them).
    auto weight_grad = bn->weight.grad().clone();
    context.all_reduce_sum(weight_grad);
    EXPECT_TRUE(torch::allclose(weight_grad, reference->weight.grad(), 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(bn->running_mean, reference->running_mean, 1e-6, 1e-6));
    EXPECT_TRUE(torch::allclose(bn->running_var, reference->running_var, 1e-5, 1e-5))
        << "the unbiased variance of the global batch";
  });
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[r]) << test::error_text(errors[r]);
}

TEST(SyncBatchNormTest, UnsyncedAndEvaluationForwardAreLibtorchs) {
  torch::manual_seed(1);
  auto x = torch::randn({4, 2, 5, 5});
  models::BatchNorm ours(2);
  torch::nn::BatchNorm2d theirs(2);
  EXPECT_TRUE(ours(x).equal(theirs(x)));
  ours->eval();
  theirs->eval();
  EXPECT_TRUE(ours(x).equal(theirs(x)));
  EXPECT_FALSE(ours->synchronized());
}

}  // namespace
}  // namespace ddpx::dist
