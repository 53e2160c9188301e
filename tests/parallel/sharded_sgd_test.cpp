// ShardedSgd: two DDP ranks that each update half of the parameters, kept once in shared
// memory, end every step with the parameters and momentum of an unsharded step, bit for bit, on
// both ranks; it declines what
// it cannot do exactly (other optimizers, dampening) on every rank alike, and a momentum
// buffer replaced after set-up is refused instead of silently ignored.
#include "parallel/data/sharded_sgd.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"
#include "distributed/peer_memory.h"
#include "distributed/ranks.h"
#include "optim/sgd_kernel.h"
#include "parallel/data/ddp.h"

namespace ddpx::dist {
namespace {

using test::error_text;
using test::run_ranks;

struct SplitNetImpl : torch::nn::Module {
  SplitNetImpl() {
    a = register_module("a", torch::nn::Linear(8, 32));
    b = register_module("b", torch::nn::Linear(32, 16));
    c = register_module("c", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::tanh(b(torch::tanh(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(SplitNet);

SplitNet make_split_model() {
  torch::manual_seed(3);
  return SplitNet();
}

struct Outcome {
  std::vector<torch::Tensor> weights, momenta;
  std::vector<int> owners;
  bool in_shared_memory = true;
};

enum class Mode { kPlain, kSharded, kInBackward };

// Three SGD steps (momentum, weight decay) of two DDP ranks on halves of fixed batches, with
// the gradients in several buckets.
std::vector<Outcome> train_split(Mode mode) {
  const bool sharded = mode != Mode::kPlain;
  std::vector<torch::Tensor> xs, ys;
  torch::manual_seed(11);
  for (int s = 0; s < 3; ++s) {
    xs.push_back(torch::randn({8, 8}));
    ys.push_back(torch::randn({8, 4}));
  }
  std::vector<SplitNet> models{make_split_model(), make_split_model()};
  std::vector<Outcome> out(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DdpOptions small;  // several buckets, each split between the ranks mid-parameter
    small.first_bucket_bytes = 256;
    small.bucket_bytes = 1024;
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context, small);
    torch::optim::SGD sgd(models[rank]->parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
    std::unique_ptr<parallel::ShardedSgd> shard;
    if (sharded) {
      shard = parallel::ShardedSgd::create(sgd, context.process_group(), context.peer_memory());
      if (!shard) throw std::runtime_error("ShardedSgd::create declined");
      out[rank].owners = shard->owners();
      if (mode == Mode::kInBackward && !shard->step_in_backward(ddp))
        throw std::runtime_error("step_in_backward declined");
    }
    for (int s = 0; s < 3; ++s) {
      sgd.zero_grad();
      auto x = xs[s].narrow(0, rank * 4, 4), y = ys[s].narrow(0, rank * 4, 4);
      (ddp.forward(x) - y).pow(2).mean().backward();
      if (shard) {
        shard->step();
      } else {
        sgd.step();
      }
    }
    auto* memory = context.peer_memory();
    const auto params = models[rank]->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      out[rank].weights.push_back(p.detach().clone());
      auto& state =
          static_cast<torch::optim::SGDParamState&>(*sgd.state().at(optim::sgd_state_key(p)));
      out[rank].momenta.push_back(state.momentum_buffer().clone());
      // Each parameter lives once, in its owner's published memory, and is used from there by
      // every rank.
      const bool here = memory != nullptr && memory->offset_of(p).has_value();
      out[rank].in_shared_memory &= !sharded || here == (out[rank].owners.at(i) == rank);
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  return out;
}

// step()'s kUsage message, or "" (and a failure) when it did not throw one.
std::string usage_error_of_step(parallel::ShardedSgd& shard) {
  try {
    shard.step();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    return e.what();
  }
  ADD_FAILURE() << "step() did not throw";
  return "";
}

void expect_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << " #" << i;
}

TEST(ShardedSgdTest, HalfTheUpdatesPerRankSameWeightsAndMomentumBitForBit) {
  auto plain = train_split(Mode::kPlain);
  auto sharded = train_split(Mode::kSharded);
  ASSERT_EQ(sharded.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    expect_identical(sharded[r].weights, plain[r].weights, "weights on rank " + std::to_string(r));
    expect_identical(sharded[r].momenta, plain[r].momenta, "momentum on rank " + std::to_string(r));
    EXPECT_TRUE(sharded[r].in_shared_memory) << "rank " << r;
  }
  // Both ranks own some parameters, and agree on who owns what.
  EXPECT_EQ(sharded[0].owners, sharded[1].owners);
  EXPECT_NE(std::count(sharded[0].owners.begin(), sharded[0].owners.end(), 0), 0);
  EXPECT_NE(std::count(sharded[0].owners.begin(), sharded[0].owners.end(), 1), 0);
}

// The step inside backward: each bucket averaged and stepped in one pass, half per rank.
TEST(ShardedSgdTest, StepInBackwardGivesTheSameWeightsAndMomentumBitForBit) {
  auto plain = train_split(Mode::kPlain);
  auto fused = train_split(Mode::kInBackward);
  for (int r = 0; r < 2; ++r) {
    expect_identical(fused[r].weights, plain[r].weights, "weights on rank " + std::to_string(r));
    expect_identical(fused[r].momenta, plain[r].momenta, "momentum on rank " + std::to_string(r));
  }
}

TEST(ShardedSgdTest, StepInBackwardRefusesAStepAfterABackwardThatDidNotSynchronise) {
  std::vector<std::string> messages(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    auto model = make_split_model();
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), context);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto shard = parallel::ShardedSgd::create(sgd, context.process_group(), context.peer_memory());
    ASSERT_NE(shard, nullptr);
    ASSERT_TRUE(shard->step_in_backward(ddp));
    {
      auto guard = ddp.no_sync();
      ddp.forward(torch::randn({4, 8})).sum().backward();
    }
    messages[rank] = usage_error_of_step(*shard);
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (const auto& m : messages) EXPECT_NE(m.find("did not synchronise"), std::string::npos) << m;
}

TEST(ShardedSgdTest, DeclinesWhatItCannotDoExactlyOnEveryRank) {
  std::vector<int> declined(2, 0);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    auto model = make_split_model();
    torch::optim::SGD damped(model->parameters(),
                             torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1));
    declined[rank] += parallel::ShardedSgd::create(damped, context.process_group(),
                                                   context.peer_memory()) == nullptr;
    // One rank's optimizer qualifies, the other's does not: neither shards.
    torch::optim::SGD half(
        model->parameters(),
        torch::optim::SGDOptions(0.1).momentum(0.9).dampening(rank == 0 ? 0 : 0.5));
    declined[rank] += parallel::ShardedSgd::create(half, context.process_group(),
                                                   context.peer_memory()) == nullptr;
  });
  EXPECT_ALL_RANKS_OK(errors);
  EXPECT_EQ(declined, (std::vector<int>{2, 2}));
}

TEST(ShardedSgdTest, AMomentumBufferReplacedAfterSetUpIsRefused) {
  std::vector<std::string> messages(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    auto model = make_split_model();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto shard = parallel::ShardedSgd::create(sgd, context.process_group(), context.peer_memory());
    ASSERT_NE(shard, nullptr);
    torch::Tensor p = model->parameters()[0];
    auto& state =
        static_cast<torch::optim::SGDParamState&>(*sgd.state().at(optim::sgd_state_key(p)));
    state.momentum_buffer(torch::zeros_like(p));  // as loading a checkpoint would
    messages[rank] = usage_error_of_step(*shard);
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (const auto& m : messages)
    EXPECT_NE(m.find("replaced after the sharded optimizer"), std::string::npos) << m;
}

}  // namespace
}  // namespace ddpx::dist
