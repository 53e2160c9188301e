// The fused SGD pass against libtorch's own torch::optim::SGD::step(): bit-identical weights
// and momentum over several steps, for float and double, with and without weight decay and
// Nesterov, on sizes that leave vector tails; and it declines what it does not cover.
#include "optim/sgd_kernel.h"

#include <gtest/gtest.h>

namespace ddpx::optim {
namespace {

struct Case {
  torch::ScalarType dtype;
  double momentum, weight_decay;
  bool nesterov;
};

// Three steps of the same SGD on two copies of the same parameters and gradients: libtorch's
// step for one, fused_sgd_step for the other.
void expect_same_as_libtorch(const Case& c) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> a, b;
  for (int64_t n : {1, 7, 8, 33, 513, 4099}) {
    auto t = torch::randn({n}, torch::TensorOptions().dtype(c.dtype));
    a.push_back(t.clone().requires_grad_(true));
    b.push_back(t.clone().requires_grad_(true));
  }
  a.push_back(torch::randn({3, 5, 7}, torch::TensorOptions().dtype(c.dtype)).requires_grad_(true));
  b.push_back(a.back().detach().clone().requires_grad_(true));
  auto options = torch::optim::SGDOptions(0.05)
                     .momentum(c.momentum)
                     .weight_decay(c.weight_decay)
                     .nesterov(c.nesterov);
  torch::optim::SGD reference(a, options), fused(b, options);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference.step();
    ASSERT_TRUE(fused_sgd_step(fused));
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << "parameter " << i << " differs after 3 steps: max |diff| "
        << (a[i] - b[i]).abs().max().item<double>();
    if (c.momentum == 0) continue;
    auto key = [](const torch::Tensor& p) { return sgd_state_key(p); };
    auto& ma = static_cast<torch::optim::SGDParamState&>(*reference.state().at(key(a[i])));
    auto& mb = static_cast<torch::optim::SGDParamState&>(*fused.state().at(key(b[i])));
    EXPECT_TRUE(torch::equal(ma.momentum_buffer(), mb.momentum_buffer())) << "momentum " << i;
  }
}

TEST(SgdKernelTest, BitIdenticalToLibtorchSgdForEveryCombination) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64})
    for (double momentum : {0.0, 0.9})
      for (double wd : {0.0, 5e-4})
        for (bool nesterov : {false, true}) {
          if (nesterov && momentum == 0) continue;  // libtorch refuses that combination
          SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " momentum " << momentum
                                            << " weight decay " << wd << " nesterov " << nesterov);
          expect_same_as_libtorch({dtype, momentum, wd, nesterov});
        }
}

TEST(SgdKernelTest, OneReadManyWritesGivesTheSameValuesEverywhere) {
  torch::manual_seed(9);
  auto g = torch::randn({1000}), p = torch::randn({1000}), m = torch::randn({1000});
  auto p2 = torch::empty_like(p), m2 = torch::empty_like(m);
  auto expected_p = p.clone(), expected_m = m.clone();
  {
    float* po = expected_p.data_ptr<float>();
    float* mo = expected_m.data_ptr<float>();
    sgd_update<float>(g.data_ptr<float>(), po, mo, 1000, SgdHyper{0.1, 0.9, 1e-4, false}, &po, &mo,
                      1);
  }
  float* ps[] = {p.data_ptr<float>(), p2.data_ptr<float>()};
  float* ms[] = {m.data_ptr<float>(), m2.data_ptr<float>()};
  sgd_update<float>(g.data_ptr<float>(), p.data_ptr<float>(), m.data_ptr<float>(), 1000,
                    SgdHyper{0.1, 0.9, 1e-4, false}, ps, ms, 2);
  EXPECT_TRUE(torch::equal(p, expected_p));
  EXPECT_TRUE(torch::equal(p2, expected_p));
  EXPECT_TRUE(torch::equal(m, expected_m));
  EXPECT_TRUE(torch::equal(m2, expected_m));
}

TEST(SgdKernelTest, DeclinesDampeningAndHalfPrecisionWithoutTouchingAnything) {
  auto p = torch::ones({4}).requires_grad_(true);
  p.mutable_grad() = torch::ones({4});
  torch::optim::SGD damped({p}, torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  EXPECT_FALSE(fused_sgd_step(damped));
  auto h = torch::ones({4}, torch::kHalf).requires_grad_(true);
  h.mutable_grad() = torch::ones({4}, torch::kHalf);
  torch::optim::SGD half({h}, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(fused_sgd_step(half));
  EXPECT_TRUE(torch::equal(p.detach(), torch::ones({4})));
  EXPECT_TRUE(damped.state().empty());
}

}  // namespace
}  // namespace ddpx::optim
