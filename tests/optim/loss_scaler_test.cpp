// fp16 dynamic loss scaling on CPU tensors (optim/loss_scaler.h): inf/NaN detection, the skip
// decision, backoff and growth as torch.amp.GradScaler, and restoring a checkpoint's scale.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <limits>

namespace ddpx::optim {
namespace {

torch::Tensor param_with_grad(std::vector<float> grad) {
  auto p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(grad);
  return p;
}

TEST(LossScalerTest, ScalesTheLossByTheInitialScale) {
  LossScaler scaler(torch::kCPU);
  auto loss = torch::tensor({0.5f}, torch::requires_grad());
  EXPECT_FLOAT_EQ(scaler.scale(loss).item<float>(), 0.5f * 65536.0f);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 65536.0);
}

TEST(LossScalerTest, FiniteGradientsAreUnscaledAndStep) {
  LossScaler scaler(torch::kCPU, {1024.0, 2.0, 0.5, 2000});
  auto p = param_with_grad({1024.0f, -2048.0f});
  auto untouched = torch::zeros({2}, torch::requires_grad());  // no gradient: skipped
  auto found_inf = scaler.unscale({p, untouched});
  EXPECT_TRUE(LossScaler::should_step(found_inf));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({1.0f, -2.0f})));
  EXPECT_FALSE(untouched.grad().defined());
}

TEST(LossScalerTest, InfOrNanAnywhereSkipsTheStepAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    LossScaler scaler(torch::kCPU, {1024.0, 2.0, 0.5, 2000});
    auto fine = param_with_grad({1.0f});
    auto broken = param_with_grad({1.0f, bad});
    auto found_inf = scaler.unscale({fine, broken});
    EXPECT_FALSE(LossScaler::should_step(found_inf)) << bad;
    scaler.update(found_inf);
    EXPECT_DOUBLE_EQ(scaler.current_scale(), 512.0) << bad;
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(LossScalerTest, GrowsAfterGrowthIntervalCleanStepsAndResetsOnOverflow) {
  LossScaler scaler(torch::kCPU, {8.0, 2.0, 0.5, 3});
  auto clean = torch::zeros({1});
  scaler.update(clean);
  scaler.update(clean);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(clean);  // the third clean step in a row
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 16.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.update(clean);
  scaler.update(torch::ones({1}));  // an overflow restarts the count
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 8.0);
  scaler.update(clean);
  scaler.update(clean);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 8.0);
}

TEST(LossScalerTest, RestoresACheckpointsScale) {
  LossScaler scaler(torch::kCPU, {8.0, 2.0, 0.5, 3});
  scaler.load(256.0, 2);
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 256.0);
  scaler.update(torch::zeros({1}));
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 512.0);  // 2 + 1 clean steps reach the interval
}

TEST(LossScalerTest, BadSettingsAreRefused) {
  EXPECT_ANY_THROW(LossScaler(torch::kCPU, {0.0, 2.0, 0.5, 10}));
  EXPECT_ANY_THROW(LossScaler(torch::kCPU, {8.0, 2.0, 1.5, 10}));
}

}  // namespace
}  // namespace ddpx::optim
