// fp16 loss scaling across ranks, as the trainer does it: each rank unscales its own gradients,
// the found-inf flags are summed, and every rank skips the same step and keeps one scale.
#include <gtest/gtest.h>

#include <limits>

#include "distributed/context.h"
#include "distributed/ranks.h"
#include "optim/loss_scaler.h"

namespace ddpx::dist {
namespace {

TEST(LossScalingTest, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  std::vector<double> scales(2), steps(2);
  auto errors = test::run_ranks(2, [&](int rank, Context& context) {
    optim::LossScaler scaler(torch::kCPU, {1024.0, 2.0, 0.5, 2000});
    auto p = torch::zeros({3}, torch::requires_grad());
    // Rank 1 alone overflows (its gradient is not all-reduced here, as with an unused
    // parameter or a gradient checked before the reduction).
    p.mutable_grad() = rank == 1
                           ? torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.f})
                           : torch::ones({3});
    auto found_inf = scaler.unscale({p});
    context.all_reduce_sum(found_inf);
    steps[rank] = optim::LossScaler::should_step(found_inf) ? 1 : 0;
    scaler.update(found_inf);
    scales[rank] = scaler.current_scale();
  });
  for (size_t r = 0; r < errors.size(); ++r) ASSERT_EQ(test::error_text(errors[r]), "") << r;
  EXPECT_EQ(steps[0], 0) << "rank 0 saw finite gradients but must skip with rank 1";
  EXPECT_EQ(steps[1], 0);
  EXPECT_EQ(scales[0], 512.0);
  EXPECT_EQ(scales[1], 512.0);
}

TEST(LossScalingTest, CleanStepsOnEveryRankStepTogether) {
  std::vector<double> steps(2);
  auto errors = test::run_ranks(2, [&](int rank, Context& context) {
    optim::LossScaler scaler(torch::kCPU, {1024.0, 2.0, 0.5, 2000});
    auto p = torch::zeros({3}, torch::requires_grad());
    p.mutable_grad() = torch::full({3}, 1024.0f * (rank + 1));
    auto found_inf = scaler.unscale({p});
    context.all_reduce_sum(found_inf);
    steps[rank] = optim::LossScaler::should_step(found_inf) ? 1 : 0;
    EXPECT_TRUE(torch::equal(p.grad(), torch::full({3}, static_cast<float>(rank + 1))));
  });
  for (size_t r = 0; r < errors.size(); ++r) ASSERT_EQ(test::error_text(errors[r]), "") << r;
  EXPECT_EQ(steps[0], 1);
  EXPECT_EQ(steps[1], 1);
}

}  // namespace
}  // namespace ddpx::dist
