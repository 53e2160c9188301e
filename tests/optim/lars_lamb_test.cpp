// LARS and LAMB (optim/lars.h, optim/lamb.h): their steps against a numpy reference of the
// formulas in the headers, written here independently of the C++ code; the 1-D exclusion of
// LARS; checkpoint round trips; the trainer's set_lr path; and convergence on least squares.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/serialize/archive.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "optim/lamb.h"
#include "optim/lars.h"
#include "support/support.h"

namespace ddpx::optim {
namespace {

constexpr double kReferenceTolerance = 1e-6;
constexpr int kReferenceSteps = 3;
constexpr int64_t kNoGradIndex = 4;  // make_params' parameter that never gets a gradient

// A 2-D and a 4-D weight, a bias, an all-zero weight (trust ratio 1 by the rule
// for zero norms) and a parameter that never has a gradient.
std::vector<torch::Tensor> make_params(torch::Dtype dtype, torch::Device device = torch::kCPU) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> params = {
      torch::randn({4, 5}, torch::kDouble), torch::randn({3, 2, 2, 2}, torch::kDouble),
      torch::randn({4}, torch::kDouble),    torch::zeros({3, 3}, torch::kDouble),
      torch::randn({2, 2}, torch::kDouble),
  };
  for (auto& p : params) p = p.to(device, dtype).requires_grad_();
  return params;
}

// Step `step`'s gradients: deterministic, different per step, none for kNoGradIndex.
void set_grads(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = torch::randn(params[i].sizes(), torch::kDouble);
    if (static_cast<int64_t>(i) == kNoGradIndex) continue;
    params[i].mutable_grad() = g.to(params[i].options().requires_grad(false));
  }
}

// A numpy array literal holding exactly the tensor's values (17 significant digits).
std::string numpy_literal(const torch::Tensor& t) {
  auto flat = t.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
  std::string values, shape;
  for (int64_t i = 0; i < flat.numel(); ++i)
    values += fmt::format("{:.17g},", flat[i].item<double>());
  for (int64_t d : t.sizes()) shape += fmt::format("{},", d);
  return fmt::format("np.array([{}], dtype=np.float64).reshape(({}))", values, shape);
}

// The formulas of lars.h and lamb.h in numpy, on float64, sharing no code with the optimizers.
constexpr const char* kReferencePython = R"(
import numpy as np

def norm(x):
    return float(np.sqrt(np.sum(x * x)))

def lars(params, grads, lr, momentum, wd, eta, eps):
    params = [p.copy() for p in params]
    bufs = [None] * len(params)
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            if g is None:
                continue
            p = params[i]
            if p.ndim >= 2:
                pn, gn = norm(p), norm(g)
                trust = eta * pn / (gn + wd * pn + eps) if pn > 0 and gn > 0 else 1.0
                g = (g + wd * p) * trust
            if momentum != 0:
                bufs[i] = g.copy() if bufs[i] is None else momentum * bufs[i] + g
                g = bufs[i]
            params[i] = p - lr * g
    return params

def lamb(params, grads, lr, b1, b2, eps, wd):
    params = [p.copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = [0] * len(params)
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            if g is None:
                continue
            p = params[i]
            t[i] += 1
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat = m[i] / (1 - b1 ** t[i])
            v_hat = v[i] / (1 - b2 ** t[i])
            u = m_hat / (np.sqrt(v_hat) + eps)
            if p.ndim >= 2:
                u = u + wd * p
            pn, un = norm(p), norm(u)
            trust = pn / un if pn > 0 and un > 0 else 1.0
            params[i] = p - lr * trust * u
    return params

def emit(steps, params):
    for i, p in enumerate(params):
        print("REF", steps, i, " ".join(repr(float(x)) for x in p.reshape(-1)))
)";

// Runs `call` (a Python expression using `params` and `grads[:steps]`) for 1 and
// kReferenceSteps steps; returns "steps index" -> flat values.
std::map<std::string, std::vector<double>> python_reference(const std::vector<torch::Tensor>& init,
                                                            const std::string& call) {
  std::string script = kReferencePython;
  script += "params = [";
  for (const auto& p : init) script += numpy_literal(p) + ",\n";
  script += "]\ngrads = [\n";
  auto params = init;
  for (int step = 0; step < kReferenceSteps; ++step) {
    set_grads(params, step);
    script += "  [";
    for (const auto& p : params)
      script += p.grad().defined() ? numpy_literal(p.grad()) + ",\n" : std::string("None,\n");
    script += "  ],\n";
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
  }
  script += "]\n";
  script += fmt::format("for steps in (1, {}):\n  emit(steps, {})\n", kReferenceSteps, call);
  auto result = test::run_python(script);
  EXPECT_EQ(result.exit_code, 0) << "reference script failed:\n" << result.output;
  std::map<std::string, std::vector<double>> reference;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string tag, steps, index;
    if (!(in >> tag >> steps >> index) || tag != "REF") continue;
    auto& values = reference[steps + " " + index];
    for (double x; in >> x;) values.push_back(x);
  }
  return reference;
}

// Steps a fresh optimizer over the same parameters and gradients as the reference and compares
// after 1 and kReferenceSteps steps.
void expect_matches_reference(
    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>& make,
    const std::string& call, const std::string& label) {
  const auto init = make_params(torch::kDouble);
  const auto reference = python_reference(init, call);
  ASSERT_FALSE(reference.empty());
  for (int steps : {1, kReferenceSteps}) {
    auto params = make_params(torch::kDouble);
    auto optimizer = make(params);
    for (int step = 0; step < steps; ++step) {
      set_grads(params, step);
      optimizer->step();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const auto key = fmt::format("{} {}", steps, i);
      ASSERT_EQ(reference.count(key), 1u) << key;
      auto expected = torch::tensor(reference.at(key), torch::kDouble).view(params[i].sizes());
      const double max_diff = (params[i].detach() - expected).abs().max().item<double>();
      const double moved = (expected - init[i].detach()).abs().max().item<double>();
      std::printf("  %s, %d step(s), parameter %zu: max |diff| %.3g (reference moved %.3g)\n",
                  label.c_str(), steps, i, max_diff, moved);
      EXPECT_LE(max_diff, kReferenceTolerance)
          << label << " parameter " << i << " after " << steps << " step(s)";
      // A reference that did not move would let a no-op optimizer pass.
      if (static_cast<int64_t>(i) != kNoGradIndex) EXPECT_GT(moved, 100 * kReferenceTolerance);
    }
    EXPECT_TRUE(torch::equal(params[kNoGradIndex], init[kNoGradIndex]))
        << "a parameter without a gradient moved";
  }
}

TEST(LarsTest, OneAndThreeStepsMatchNumpyReference) {
  // Larger lr and eta than the defaults, so that each step moves the weights well past the
  // tolerance.
  expect_matches_reference(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<Lars>(
            params,
            LarsOptions(/*lr=*/2.0).momentum(0.9).weight_decay(0.05).trust_coefficient(0.02));
      },
      "lars(params, grads[:steps], lr=2.0, momentum=0.9, wd=0.05, eta=0.02, eps=1e-8)", "lars");
}

TEST(LambTest, OneAndThreeStepsMatchNumpyReference) {
  expect_matches_reference(
      [](std::vector<torch::Tensor> params) {
        return std::make_unique<Lamb>(
            params,
            LambOptions(/*lr=*/0.05).betas(std::make_tuple(0.8, 0.95)).eps(1e-6).weight_decay(0.1));
      },
      "lamb(params, grads[:steps], lr=0.05, b1=0.8, b2=0.95, eps=1e-6, wd=0.1)", "lamb");
}

TEST(LarsTest, OneDimensionalParametersTakePlainMomentumSgdSteps) {
  auto lars_params = make_params(torch::kFloat), sgd_params = make_params(torch::kFloat);
  Lars lars(lars_params, LarsOptions(0.1).momentum(0.9).weight_decay(0.01));
  torch::optim::SGD sgd(sgd_params, torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    set_grads(lars_params, step);
    set_grads(sgd_params, step);
    lars.step();
    sgd.step();
  }
  // The bias: neither adapted nor decayed, bit for bit libtorch's momentum SGD.
  EXPECT_TRUE(torch::equal(lars_params[2], sgd_params[2]));
  // A weight is adapted (trust ratio about 0.001 here), so it moves far less than under SGD.
  const auto init = make_params(torch::kFloat);
  const double lars_moved = (lars_params[0] - init[0]).abs().max().item<double>();
  const double sgd_moved = (sgd_params[0] - init[0]).abs().max().item<double>();
  EXPECT_LT(lars_moved, 0.1 * sgd_moved);
}

// Steps 0..2 uninterrupted; a checkpoint after step 2 loaded into a fresh optimizer over copies
// of the parameters; steps 3..5 on both must agree bit for bit.
template <typename Opt, typename Options>
void expect_checkpoint_continues_bit_identically(const Options& options) {
  auto params = make_params(torch::kFloat);
  Opt uninterrupted(params, options);
  uninterrupted.param_groups()[0].options().set_lr(options.get_lr() * 0.5);  // saved too
  for (int step = 0; step < 3; ++step) {
    set_grads(params, step);
    uninterrupted.step();
  }
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    uninterrupted.save(archive);
    archive.save_to(bytes);
  }
  std::vector<torch::Tensor> resumed_params, fresh_params;
  for (const auto& p : params) {
    resumed_params.push_back(p.detach().clone().requires_grad_());
    fresh_params.push_back(p.detach().clone().requires_grad_());
  }
  Opt resumed(resumed_params, options);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes);
    resumed.load(archive);
  }
  EXPECT_EQ(resumed.param_groups()[0].options().get_lr(), options.get_lr() * 0.5);
  Opt fresh(fresh_params, options);  // no state: shows the state matters
  fresh.param_groups()[0].options().set_lr(options.get_lr() * 0.5);
  for (int step = 3; step < 6; ++step) {
    set_grads(params, step);
    set_grads(resumed_params, step);
    set_grads(fresh_params, step);
    uninterrupted.step();
    resumed.step();
    fresh.step();
  }
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::equal(resumed_params[i], params[i])) << "parameter " << i;
  EXPECT_FALSE(torch::equal(fresh_params[0], params[0]))
      << "restarting without the state gave the same result: the test cannot tell";
}

TEST(LarsTest, SaveThenLoadContinuesBitIdentically) {
  expect_checkpoint_continues_bit_identically<Lars>(
      LarsOptions(1.0).momentum(0.9).weight_decay(1e-4));
}

TEST(LambTest, SaveThenLoadContinuesBitIdentically) {
  expect_checkpoint_continues_bit_identically<Lamb>(LambOptions(0.01).weight_decay(0.01));
}

// The trainer's path: group.options().set_lr(lr). On a first step (no state yet) both updates
// are linear in lr, so doubling lr doubles every parameter's change.
template <typename Opt, typename Options>
void expect_set_lr_scales_the_step(const Options& options) {
  auto base = make_params(torch::kDouble), doubled = make_params(torch::kDouble);
  const auto init = make_params(torch::kDouble);
  Opt at_base(base, options), at_double(doubled, options);
  for (auto& group : at_double.param_groups()) group.options().set_lr(2 * options.get_lr());
  EXPECT_EQ(at_double.param_groups()[0].options().get_lr(), 2 * options.get_lr());
  set_grads(base, 0);
  set_grads(doubled, 0);
  at_base.step();
  at_double.step();
  for (size_t i = 0; i < base.size(); ++i) {
    auto moved = init[i] - base[i].detach(), moved_double = init[i] - doubled[i].detach();
    EXPECT_TRUE(torch::allclose(moved_double, 2 * moved, 1e-9, 1e-12)) << "parameter " << i;
  }
  EXPECT_FALSE(torch::equal(base[0], doubled[0]));
}

TEST(LarsTest, SetLrThroughGroupOptionsChangesTheStep) {
  expect_set_lr_scales_the_step<Lars>(LarsOptions(0.5).momentum(0.9).weight_decay(1e-4));
}

TEST(LambTest, SetLrThroughGroupOptionsChangesTheStep) {
  expect_set_lr_scales_the_step<Lamb>(LambOptions(0.01));
}

// 50 steps of full-batch least squares y = X w + b (a 2-D weight and a 1-D bias) through the
// closure form of step(); returns {first loss, last loss}.
std::pair<double, double> least_squares_losses(
    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>&
        make) {
  torch::manual_seed(3);
  auto x = torch::randn({256, 16});     // x: (N, D)
  auto w_true = torch::randn({16, 1});  // (D, 1)
  auto y = x.mm(w_true) + 0.5 + 0.01 * torch::randn({256, 1});
  // The weight starts at the target's scale: trust-ratio steps are relative to ||w||.
  auto weight = torch::randn({1, 16}).requires_grad_();  // as nn::Linear: (out, in)
  auto bias = torch::zeros({1}).requires_grad_();
  auto optimizer = make({weight, bias});
  std::vector<double> losses;
  for (int step = 0; step < 50; ++step) {
    auto loss = optimizer->step([&] {
      optimizer->zero_grad();
      auto l = (x.mm(weight.t()) + bias - y).pow(2).mean();
      l.backward();
      return l;
    });
    losses.push_back(loss.item<double>());
  }
  return {losses.front(), losses.back()};
}

TEST(LarsTest, DecreasesLeastSquaresLossOver50Steps) {
  auto [first, last] = least_squares_losses([](std::vector<torch::Tensor> params) {
    // eta 10x the default: with 0.001 a weight moves ~1% of its norm per step at this lr (and a
    // larger lr would make the bias's plain momentum SGD diverge), too slow for 50 steps.
    return std::make_unique<Lars>(params,
                                  LarsOptions(/*lr=*/1.0).momentum(0.9).trust_coefficient(0.01));
  });
  std::printf("  lars: loss %.4g -> %.4g\n", first, last);
  EXPECT_LT(last, 0.05 * first);
}

TEST(LambTest, DecreasesLeastSquaresLossOver50Steps) {
  auto [first, last] = least_squares_losses([](std::vector<torch::Tensor> params) {
    return std::make_unique<Lamb>(params, LambOptions(/*lr=*/0.05).weight_decay(0));
  });
  std::printf("  lamb: loss %.4g -> %.4g\n", first, last);
  EXPECT_LT(last, 0.05 * first);
}

// The same steps on CUDA and on CPU (the optimizers have no device-specific code; this checks
// that nothing in them assumes the CPU).
template <typename Opt, typename Options>
void expect_cuda_matches_cpu(const Options& options) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_params(torch::kFloat), cuda = make_params(torch::kFloat, torch::kCUDA);
  Opt on_cpu(cpu, options), on_cuda(cuda, options);
  for (int step = 0; step < 3; ++step) {
    set_grads(cpu, step);
    set_grads(cuda, step);
    on_cpu.step();
    on_cuda.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(cuda[i].is_cuda());
    EXPECT_TRUE(torch::allclose(cuda[i].cpu(), cpu[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

TEST(LarsTest, CudaStepsMatchCpu) {
  expect_cuda_matches_cpu<Lars>(LarsOptions(1.0).momentum(0.9).weight_decay(1e-4));
}

TEST(LambTest, CudaStepsMatchCpu) { expect_cuda_matches_cpu<Lamb>(LambOptions(0.01)); }

}  // namespace
}  // namespace ddpx::optim
