// A world of one with its process group forced (InitOptions::force_group, DDPX_FORCE_GROUP=1):
// what lets a machine with one GPU run DDP's NCCL paths (tests/gpu). Here, on Gloo (also with
// --transport auto: shared memory is for two ranks or more): the reducer really runs (buckets,
// all-reduces in the collective record) and a step ends where one process without DDP ends.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdlib>

#include "distributed/context.h"
#include "distributed/ranks.h"
#include "parallel/data/ddp.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

// x: (B, 8) -> (B, 4)
struct OneNetImpl : torch::nn::Module {
  OneNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(OneNet);

OneNet copy_of_net(const OneNet& source) {
  OneNet copy;
  torch::NoGradGuard no_grad;
  auto from = source->parameters();
  auto to = copy->parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  return copy;
}

// Three SGD steps with momentum; the weights after them.
std::vector<torch::Tensor> train_alone(OneNet& model, parallel::DistributedDataParallel* ddp,
                                       const std::vector<torch::Tensor>& xs,
                                       const std::vector<torch::Tensor>& ys) {
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (size_t s = 0; s < xs.size(); ++s) {
    sgd.zero_grad();
    auto out = ddp ? ddp->forward(xs[s]) : model->forward(xs[s]);
    (out - ys[s]).pow(2).mean().backward();
    sgd.step();
  }
  std::vector<torch::Tensor> weights;
  for (auto& p : model->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

std::shared_ptr<Context> init_one(Transport transport, bool force) {
  InitOptions options;
  options.device = DeviceChoice::kCpu;
  options.backend = BackendChoice::kGloo;
  options.transport = transport;
  options.timeout = std::chrono::seconds(20);
  options.force_group = force;
  return init(test::loopback_world(0, 1, test::free_port()), options);
}

TEST(GroupOfOneTest, AForcedGroupRunsTheReducerAndEndsWhereNoDdpEnds) {
  torch::manual_seed(11);
  OneNet init_weights;
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(torch::randn({8, 8}));
    ys.push_back(torch::randn({8, 4}));
  }
  OneNet plain = copy_of_net(init_weights);
  const auto expected = train_alone(plain, nullptr, xs, ys);

  for (Transport transport : {Transport::kGloo, Transport::kAuto}) {
    SCOPED_TRACE(name(transport));
    auto context = init_one(transport, /*force=*/true);
    ASSERT_TRUE(context->distributed());
    ASSERT_NE(context->process_group(), nullptr);
    // The shared-memory transport is for two ranks or more: one rank reduces through Gloo.
    EXPECT_EQ(context->backend(), "gloo");
    OneNet model = copy_of_net(init_weights);
    parallel::DdpOptions options;
    options.first_bucket_bytes = 64;  // several buckets: fc2.bias first, then the others
    options.bucket_bytes = 256;
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), *context, options);
    ASSERT_TRUE(ddp.distributed()) << "no reducer was built";
    const size_t buckets = ddp.buckets().size();
    EXPECT_GE(buckets, 2u);
    const auto weights = train_alone(model, &ddp, xs, ys);
    for (size_t i = 0; i < weights.size(); ++i)
      EXPECT_TRUE(torch::equal(weights[i], expected[i])) << "parameter " << i;
    // Every bucket of every step went through the group: the collective record has them.
    ASSERT_NE(context->trace(), nullptr);
    size_t allreduces = 0;
    for (const auto& entry : context->trace()->snapshot().entries)
      allreduces += entry.sig.op.rfind("allreduce", 0) == 0 ? 1 : 0;
    EXPECT_GE(allreduces, 3 * buckets);
    // The context's own collectives work on the group of one too.
    auto t = torch::tensor({2.0});
    context->all_reduce_sum(t);
    context->broadcast(t);
    context->barrier();
    EXPECT_EQ(t.item<double>(), 2.0);
  }
}

TEST(GroupOfOneTest, WithoutForcingAWorldOfOneHasNoGroupAndNoReducer) {
  auto context = init_one(Transport::kAuto, /*force=*/false);
  EXPECT_FALSE(context->distributed());
  OneNet model;
  parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), *context);
  EXPECT_FALSE(ddp.distributed());
}

TEST(GroupOfOneTest, TheEnvironmentVariableForcesTheGroup) {
  ::setenv("DDPX_FORCE_GROUP", "1", 1);
  auto context = init_one(Transport::kGloo, /*force=*/false);
  ::unsetenv("DDPX_FORCE_GROUP");
  EXPECT_TRUE(context->distributed());
  EXPECT_EQ(context->backend(), "gloo");
}

}  // namespace
}  // namespace ddpx::dist
