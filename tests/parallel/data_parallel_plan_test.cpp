// The data-parallel plan's contract (parallel/plan.h): after the same global batches, the full
// state_dict() of each of two ranks (each fed half of every batch) is that of one process fed the
// whole batches: the same weights and momentum, in the model's own names, loadable into a plain
// model and optimizer; and describe() says where the update runs (inside backward on the
// shared-memory transport) and how the model is split.
#include "parallel/data/data_parallel_plan.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

#include "distributed/ranks.h"
#include "optim/sgd_kernel.h"

namespace ddpx::dist {
namespace {

using test::error_text;
using test::run_ranks;

struct DpNetImpl : torch::nn::Module {
  DpNetImpl() {
    a = register_module("a", torch::nn::Linear(8, 32));
    b = register_module("b", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(DpNet);

DpNet make_dp_model() {
  torch::manual_seed(3);
  return DpNet();
}

std::unique_ptr<torch::optim::Optimizer> make_dp_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
}

struct State {
  std::vector<torch::Tensor> weights, momenta;  // read back from the plan's state_dict()
  std::string description;
};

// The plan's full state, loaded into a fresh plain model and optimizer.
State read_back_dp(parallel::Plan& plan) {
  torch::serialize::OutputArchive model_out, optimizer_out;
  plan.state_dict(model_out, optimizer_out);
  std::ostringstream model_bytes, optimizer_bytes;
  model_out.save_to(model_bytes);
  optimizer_out.save_to(optimizer_bytes);
  DpNet fresh;
  auto sgd = make_dp_sgd(fresh->parameters());
  torch::serialize::InputArchive model_in, optimizer_in;
  std::istringstream model_stream(model_bytes.str()), optimizer_stream(optimizer_bytes.str());
  model_in.load_from(model_stream);
  optimizer_in.load_from(optimizer_stream);
  fresh->load(model_in);
  sgd->load(optimizer_in);
  State s;
  for (const auto& p : fresh->parameters()) {
    s.weights.push_back(p.detach().clone());
    auto& state =
        static_cast<torch::optim::SGDParamState&>(*sgd->state().at(optim::sgd_state_key(p)));
    s.momenta.push_back(state.momentum_buffer().clone());
  }
  return s;
}

// Three steps on fixed batches of 8, split over `world` ranks (each takes its slice).
std::vector<State> train_dp(int world) {
  std::vector<torch::Tensor> xs, ys;
  torch::manual_seed(11);
  for (int s = 0; s < 3; ++s) {
    xs.push_back(torch::randn({8, 8}));
    ys.push_back(torch::randn({8, 4}));
  }
  std::vector<State> out(world);
  auto errors = run_ranks(world, [&](int rank, Context& context) {
    parallel::DataParallelPlan plan(torch::nn::AnyModule(make_dp_model()), context, make_dp_sgd,
                                    {});
    out[rank].description = plan.describe();
    const int64_t n = 8 / world;
    for (int s = 0; s < 3; ++s) {
      parallel::MicroBatch mb;
      mb.input = xs[s].narrow(0, rank * n, n);
      mb.target = ys[s].narrow(0, rank * n, n);
      mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
        return (out - y).pow(2).mean();
      };
      mb.learning_rate = 0.1;
      plan.forward_backward(mb, /*sync=*/true);
      plan.step();
      plan.zero_grad();
    }
    State s = read_back_dp(plan);
    s.description = out[rank].description;
    out[rank] = s;
  });
  EXPECT_ALL_RANKS_OK(errors);
  return out;
}

TEST(DataParallelPlanTest, StateDictOfEachRankIsTheSingleProcessState) {
  std::vector<State> one = train_dp(1), two = train_dp(2);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(one[0].weights.size(), 4u);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(two[rank].weights.size(), one[0].weights.size());
    for (size_t i = 0; i < one[0].weights.size(); ++i) {
      // The ranks hold one state bit for bit; the single process's up to the order of sums.
      EXPECT_TRUE(torch::equal(two[rank].weights[i], two[0].weights[i])) << rank << " #" << i;
      EXPECT_TRUE(torch::allclose(two[rank].weights[i], one[0].weights[i], 1e-5, 1e-6))
          << "weight #" << i << " of rank " << rank;
      EXPECT_TRUE(torch::allclose(two[rank].momenta[i], one[0].momenta[i], 1e-5, 1e-6))
          << "momentum #" << i << " of rank " << rank;
    }
  }
  // The weights moved: the state is not simply the initial one.
  EXPECT_FALSE(torch::allclose(one[0].weights[0], make_dp_model()->parameters()[0]));
}

TEST(DataParallelPlanTest, DescribeSaysWhereTheUpdateRuns) {
  std::vector<State> one = train_dp(1), two = train_dp(2);
  EXPECT_NE(one[0].description.find("plan: one process"), std::string::npos) << one[0].description;
  EXPECT_NE(one[0].description.find("optimizer step: fused SGD"), std::string::npos)
      << one[0].description;
  for (const auto& s : two) {
    // The test ranks share memory: SGD's update runs inside backward, and the line says so.
    EXPECT_NE(s.description.find("inside backward"), std::string::npos) << s.description;
    EXPECT_NE(s.description.find("data parallel over 2 ranks"), std::string::npos) << s.description;
  }
}

}  // namespace
}  // namespace ddpx::dist
