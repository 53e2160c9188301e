// AdamW through ATen's fused kernel (optim/fused_adamw.h) against torch::optim::AdamW::step on
// the same parameters and gradients: two groups (weight decay on the matrices only, as ddpx
// trains), a channels_last weight, amsgrad; the state is libtorch's, so a checkpoint written after
// fused steps loads into libtorch's AdamW and the two go on alike.
#include "optim/fused_adamw.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/serialize.h>

#include <sstream>

namespace ddpx::optim {
namespace {

std::vector<torch::Tensor> make_adamw_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({16, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(),
          torch::randn({10, 64}).requires_grad_(), torch::randn({16}).requires_grad_(),
          torch::randn({64}).requires_grad_()};
}

void set_adamw_grads(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p);  // keeps p's memory format
}

// The matrices with weight decay, the vectors without: ddpx's AdamW groups.
torch::optim::AdamW make_adamw(std::vector<torch::Tensor>& p, bool amsgrad) {
  auto decay = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1);
  auto none = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.0);
  decay.amsgrad(amsgrad);
  none.amsgrad(amsgrad);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[1]},
                      std::make_unique<torch::optim::AdamWOptions>(decay));
  groups.emplace_back(std::vector<torch::Tensor>{p[2], p[3]},
                      std::make_unique<torch::optim::AdamWOptions>(none));
  return torch::optim::AdamW(std::move(groups), decay);
}

void expect_adamw_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                        const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6))
        << what << ": parameter " << i << " differs by "
        << (a[i] - b[i]).abs().max().item<double>();
}

TEST(FusedAdamwTest, MatchesLibtorchAdamwOverSeveralSteps) {
  for (bool amsgrad : {false, true}) {
    auto mine = make_adamw_params(1), reference = make_adamw_params(1);
    auto fused = make_adamw(mine, amsgrad), plain = make_adamw(reference, amsgrad);
    for (int step = 0; step < 5; ++step) {
      set_adamw_grads(mine, step);
      set_adamw_grads(reference, step);
      ASSERT_TRUE(fused_adamw_step(fused));
      plain.step();
    }
    expect_adamw_close(mine, reference, amsgrad ? "amsgrad" : "adamw");
    // The steps moved the weights (a step that did nothing would also be "close" to nothing).
    EXPECT_GT((mine[1] - make_adamw_params(1)[1]).abs().max().item<double>(), 1e-3);
    ASSERT_EQ(fused.state().size(), plain.state().size());
    for (auto& p : mine) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(
          *fused.state().at(p.unsafeGetTensorImpl()));
      EXPECT_EQ(s.step(), 5);
      EXPECT_EQ(s.exp_avg().strides(), p.strides());  // the state keeps the weight's layout
    }
  }
}

TEST(FusedAdamwTest, ItsCheckpointLoadsIntoLibtorchsAdamwAndGoesOnAlike) {
  auto mine = make_adamw_params(2), reference = make_adamw_params(2);
  auto fused = make_adamw(mine, false), plain = make_adamw(reference, false);
  for (int step = 0; step < 3; ++step) {
    set_adamw_grads(mine, step);
    ASSERT_TRUE(fused_adamw_step(fused));
  }
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < mine.size(); ++i) reference[i].copy_(mine[i]);
  }
  std::stringstream bytes;
  torch::save(fused, bytes);
  torch::load(plain, bytes);
  for (int step = 3; step < 6; ++step) {
    set_adamw_grads(mine, step);
    set_adamw_grads(reference, step);
    ASSERT_TRUE(fused_adamw_step(fused));
    plain.step();
  }
  expect_adamw_close(mine, reference, "after the checkpoint");
}

TEST(FusedAdamwTest, AGroupOfTwoDtypesIsNotCoveredAndChangesNothing) {
  auto params = make_adamw_params(3);
  params[3] = torch::randn({64}, torch::kFloat64).requires_grad_();
  auto adamw = make_adamw(params, false);
  set_adamw_grads(params, 0);
  const auto before = params[2].detach().clone();
  EXPECT_FALSE(fused_adamw_step(adamw));
  EXPECT_TRUE(torch::equal(params[2], before));
  EXPECT_TRUE(adamw.state().empty());
}

// The kernel on a GPU (the path GPU runs take; compiled everywhere, run where a GPU is visible)
// against libtorch's AdamW on the CPU.
TEST(FusedAdamwTest, CudaStepsMatchLibtorchOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_adamw_params(4), cuda = make_adamw_params(4);
  for (auto& p : cuda) p = p.detach().to(torch::kCUDA).requires_grad_();
  auto on_cuda = make_adamw(cuda, false), on_cpu = make_adamw(cpu, false);
  for (int step = 0; step < 3; ++step) {
    set_adamw_grads(cpu, step);
    for (size_t i = 0; i < cuda.size(); ++i)
      cuda[i].mutable_grad() = cpu[i].grad().to(torch::kCUDA);
    ASSERT_TRUE(fused_adamw_step(on_cuda));
    on_cpu.step();
  }
  std::vector<torch::Tensor> back;
  for (auto& p : cuda) back.push_back(p.detach().cpu());
  expect_adamw_close(back, cpu, "cuda");
}

}  // namespace
}  // namespace ddpx::optim
