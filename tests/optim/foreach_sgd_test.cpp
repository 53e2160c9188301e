// The fused multi-tensor SGD step used for GPU parameters (optim/foreach_sgd.h) against
// torch::optim::SGD::step on the same parameters and gradients (ATen's fused kernel runs on CPU
// too, so the comparison runs here).
#include "optim/foreach_sgd.h"

#include <gtest/gtest.h>

namespace ddpx::optim {
namespace {

std::vector<torch::Tensor> make_foreach_params(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{16, 3, 3, 3}, {16}, {10, 64}}) {
    params.push_back(torch::randn(shape).requires_grad_());
  }
  return params;
}

void set_foreach_grads(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p);
}

TEST(ForeachSgdTest, MatchesLibtorchSgdOverSeveralSteps) {
  for (bool nesterov : {false, true}) {
    auto mine = make_foreach_params(1), reference = make_foreach_params(1);
    auto options =
        torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4).nesterov(nesterov);
    torch::optim::SGD fused(mine, options), plain(reference, options);
    for (int step = 0; step < 4; ++step) {
      set_foreach_grads(mine, step);
      set_foreach_grads(reference, step);
      ASSERT_TRUE(foreach_sgd_step(fused));
      plain.step();
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(torch::allclose(mine[i], reference[i], 1e-5, 1e-6))
          << "parameter " << i << " nesterov " << nesterov;
    }
    // The momentum buffers are where libtorch keeps them: a checkpoint saves the same state.
    EXPECT_EQ(fused.state().size(), plain.state().size());
  }
}

TEST(ForeachSgdTest, ParametersWithoutGradientsAreLeftAlone) {
  auto params = make_foreach_params(2);
  auto before = params[1].detach().clone();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  params[0].mutable_grad() = torch::ones_like(params[0]);
  params[2].mutable_grad() = torch::ones_like(params[2]);
  ASSERT_TRUE(foreach_sgd_step(sgd));
  EXPECT_TRUE(torch::equal(params[1], before));
}

TEST(ForeachSgdTest, DampeningIsNotCoveredAndChangesNothing) {
  auto params = make_foreach_params(3);
  auto before = params[0].detach().clone();
  set_foreach_grads(params, 0);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1));
  EXPECT_FALSE(foreach_sgd_step(sgd));
  EXPECT_TRUE(torch::equal(params[0], before));
}

}  // namespace
}  // namespace ddpx::optim
