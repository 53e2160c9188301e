// PowerSGD (parallel/data/powersgd.h) on real Gloo groups of 2 and 3 ranks: exact where the
// ranks' gradients share a rank-R column space, the error feedback keeping exactly what the
// approximation missed, 1-D and small tensors averaged exactly, a plain average before the start
// step, and the collective record holding the factors' bytes and nothing more.
#include "parallel/data/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/ranks.h"
#include "trace/collective_trace.h"

namespace ddpx::parallel {
namespace {

using test::error_text;
using test::run_ranks;

// One bucket as DDP's reducer hands it over: a 24x16 weight, a 24-long bias and two 16x16
// weights (one shape: batched together), in one flat buffer.
struct Layout {
  std::vector<torch::Tensor> params;  // shapes only
  std::vector<int64_t> offsets;
  int64_t numel = 0;
};

Layout layout() {
  Layout l;
  for (auto shape : std::vector<std::vector<int64_t>>{{24, 16}, {24}, {16, 16}, {16, 16}}) {
    l.params.push_back(torch::empty(shape));
    l.offsets.push_back(l.numel);
    l.numel += l.params.back().numel();
  }
  return l;
}

GradBucket bucket_of(const Layout& l, const torch::Tensor& buffer) {
  GradBucket b;
  b.index = 0;
  b.buffer = buffer;
  b.params = l.params;
  b.offsets = l.offsets;
  b.last = true;
  return b;
}

torch::Tensor piece(const Layout& l, const torch::Tensor& flat, size_t k) {
  return flat.narrow(0, l.offsets[k], l.params[k].numel()).view(l.params[k].sizes());
}

// Each rank's gradient at `step`: random, or with every matrix U V^T for a U (rank 2) that all
// ranks share, so that their mean has rank 2 too.
torch::Tensor gradient(const Layout& l, int rank, int step, bool shared_column_space) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank);
  auto shared = at::make_generator<at::CPUGeneratorImpl>(1000 * step + 999);
  torch::Tensor flat = torch::empty({l.numel});
  for (size_t k = 0; k < l.params.size(); ++k) {
    auto target = piece(l, flat, k);
    if (!shared_column_space || l.params[k].dim() == 1) {
      target.copy_(at::randn(target.sizes(), gen, torch::TensorOptions()));
      continue;
    }
    auto u = at::randn({target.size(0), 2}, shared, torch::TensorOptions());
    auto v = at::randn({target.size(1), 2}, gen, torch::TensorOptions());
    target.copy_(u.matmul(v.t()));
  }
  return flat;
}

torch::Tensor mean_gradient(const Layout& l, int world, int step, bool shared) {
  torch::Tensor sum = torch::zeros({l.numel});
  for (int r = 0; r < world; ++r) sum += gradient(l, r, step, shared);
  return sum / world;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

PowerSgdOptions with_rank(int64_t rank, int64_t start_iter = 0) {
  PowerSgdOptions o;
  o.rank = rank;
  o.start_iter = start_iter;
  return o;
}

TEST(PowerSgdTest, ExactWhereTheRanksGradientsShareTheirColumnSpace) {
  const Layout l = layout();
  constexpr int kWorld = 3;
  std::vector<torch::Tensor> out(kWorld);
  auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
    auto powersgd = std::make_shared<PowerSgd>(context.process_group(), with_rank(2));
    auto buffer = gradient(l, rank, 0, /*shared_column_space=*/true);
    powersgd->reduce(bucket_of(l, buffer))->wait();
    out[rank] = buffer;
  });
  EXPECT_ALL_RANKS_OK(errors);
  const auto expected = mean_gradient(l, kWorld, 0, true);
  for (int r = 0; r < kWorld; ++r) EXPECT_LT(relative(out[r], expected), 1e-5) << "rank " << r;
}

// Error feedback: what a rank sends plus what it keeps is what it had. Over the ranks, the
// average they agree on plus the mean of the kept errors is the mean of (gradient + last
// error), every step; and 1-D tensors arrive as the exact mean.
TEST(PowerSgdTest, TheErrorFeedbackKeepsExactlyWhatTheApproximationMissed) {
  const Layout l = layout();
  constexpr int kWorld = 2, kSteps = 4;
  std::vector<std::vector<torch::Tensor>> out(kWorld), err(kWorld);
  auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
    auto powersgd = std::make_shared<PowerSgd>(context.process_group(), with_rank(1));
    for (int step = 0; step < kSteps; ++step) {
      auto buffer = gradient(l, rank, step, false);
      powersgd->reduce(bucket_of(l, buffer))->wait();
      out[rank].push_back(buffer);
      err[rank].push_back(powersgd->error_feedback(0).clone());
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  torch::Tensor last_error_mean = torch::zeros({l.numel});
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_TRUE(out[0][step].equal(out[1][step])) << "the ranks agree on the average";
    const auto error_mean = (err[0][step] + err[1][step]) / 2;
    const auto had = mean_gradient(l, kWorld, step, false) + last_error_mean;
    EXPECT_LT(relative(out[0][step] + error_mean, had), 1e-5);
    EXPECT_GT(relative(out[0][step], had), 0.05) << "rank 1 of a random matrix is not exact";
    EXPECT_LT(
        relative(piece(l, out[0][step], 1), piece(l, mean_gradient(l, kWorld, step, false), 1)),
        1e-6)
        << "the bias is sent uncompressed";
    last_error_mean = error_mean;
  }
}

// The same gradient every step: with error feedback the running sum of the averages catches up
// with the true one (the missed part is sent later; the gap shrinks as 1/steps: 0.045 after 200
// steps here), without it the average stays the rank-1 approximation.
TEST(PowerSgdTest, OverStepsTheAveragesSumToTheTrueOnesOnlyWithErrorFeedback) {
  const Layout l = layout();
  constexpr int kWorld = 2, kSteps = 200;
  const auto expected = mean_gradient(l, kWorld, 0, false);
  for (bool feedback : {true, false}) {
    SCOPED_TRACE(feedback ? "error feedback" : "no error feedback");
    std::vector<torch::Tensor> total(kWorld);
    std::vector<double> first_step_error(kWorld);
    auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
      auto options = with_rank(1);
      options.error_feedback = feedback;
      auto powersgd = std::make_shared<PowerSgd>(context.process_group(), options);
      total[rank] = torch::zeros({l.numel});
      for (int step = 0; step < kSteps; ++step) {
        auto buffer = gradient(l, rank, 0, false);
        powersgd->reduce(bucket_of(l, buffer))->wait();
        if (step == 0) first_step_error[rank] = relative(buffer, expected);
        total[rank] += buffer;
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
    EXPECT_GT(first_step_error[0], 0.3);
    if (feedback)
      EXPECT_LT(relative(total[0] / kSteps, expected), 0.1);
    else
      EXPECT_GT(relative(total[0] / kSteps, expected), 0.3);
  }
}

TEST(PowerSgdTest, BeforeItsStartStepItIsThePlainAverageInOneAllReduce) {
  const Layout l = layout();
  constexpr int kWorld = 2;
  std::vector<std::vector<torch::Tensor>> out(kWorld);
  std::vector<std::vector<std::vector<int64_t>>> sent(kWorld);  // bytes of each all-reduce, by step
  auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
    ASSERT_NE(context.trace(), nullptr);
    auto powersgd = std::make_shared<PowerSgd>(context.process_group(), with_rank(2, 2));
    for (int step = 0; step < 3; ++step) {
      const auto entries = context.trace()->snapshot().entries;
      const uint64_t before = entries.empty() ? 0 : entries.back().seq;
      auto buffer = gradient(l, rank, step, false);
      powersgd->reduce(bucket_of(l, buffer))->wait();
      out[rank].push_back(buffer);
      sent[rank].emplace_back();
      for (const auto& e : context.trace()->snapshot().entries)
        if (e.seq > before) sent[rank].back().push_back(e.sig.bytes());
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int step = 0; step < 2; ++step) {
    EXPECT_LT(relative(out[0][step], mean_gradient(l, kWorld, step, false)), 1e-6);
    EXPECT_EQ(sent[0][step], std::vector<int64_t>{l.numel * 4}) << "step " << step;
  }
  // From the start step: the bias (24 floats), then P (24 x 2, and 2 x 16 x 2 batched), then Q
  // (16 x 2, and 2 x 16 x 2).
  EXPECT_EQ(sent[0][2],
            (std::vector<int64_t>{24 * 4, (24 * 2 + 2 * 16 * 2) * 4, (16 * 2 + 2 * 16 * 2) * 4}));
  const auto traffic = powersgd_traffic(l.params, with_rank(2));
  EXPECT_EQ(traffic.numel_before, l.numel);
  EXPECT_EQ(traffic.numel_after, 24 + (24 + 16) * 2 + 2 * (16 + 16) * 2);
  EXPECT_EQ(traffic.error_feedback_bytes, l.numel * 4);
}

TEST(PowerSgdTest, RanksTooLargeForEveryMatrixAreRefusedNamingTheLargestThatCompresses) {
  torch::nn::Linear fc(16, 24);  // 24 x 16: rank 4 compresses (160 * 2 < 384), 5 does not
  const auto params = fc->parameters();
  EXPECT_NO_THROW(check_powersgd(params, with_rank(4), "--model mlp"));
  try {
    check_powersgd(params, with_rank(5), "--model mlp");
    FAIL() << "rank 5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--powersgd_rank 5: no gradient matrix of --model mlp"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("use --powersgd_rank 4 or less"), std::string::npos)
        << e.what();
  }
  torch::nn::Linear tiny(2, 2);
  try {
    check_powersgd(tiny->parameters(), with_rank(1), "--model tiny");
    FAIL() << "a model without a compressible matrix accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use --comm_hook allreduce"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddpx::parallel
