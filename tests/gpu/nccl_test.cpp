// The GPU paths of dist/: NCCL through the traced backend, and Gloo on CUDA tensors for ranks
// that share one GPU (NCCL refuses two ranks on a device). Label `gpu`: each test skips with a
// message where this process sees too few GPUs (CI has none), so here they only prove that the
// CUDA and NCCL code compiles and links.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "dist/context.h"
#include "dist/ddp.h"
#include "dist/ranks.h"
#include "support/support.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

// Runs fn(rank, context) for `world` ranks on threads, each joined with `options`.
void run_ranks(int world, const InitOptions& options,
               const std::function<void(int, Context&)>& fn) {
  const int port = test::free_port();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto context = init(test::loopback_world(rank, world, port), options);
        fn(rank, *context);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

TEST(NcclTest, TwoGpusAllReduceThroughTheTracedNcclBackend) {
  if (torch::cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 visible GPUs, this process sees " << torch::cuda::device_count();
  InitOptions options;
  options.backend = BackendChoice::kNccl;
  options.timeout = std::chrono::seconds(60);
  std::vector<torch::Tensor> sums(2);
  std::vector<size_t> recorded(2);
  run_ranks(2, options, [&](int rank, Context& context) {
    EXPECT_EQ(context.backend().rfind("nccl", 0), 0u) << context.backend();
    auto t = torch::full({1 << 20}, float(rank + 1), torch::Device(torch::kCUDA, rank));
    std::vector<torch::Tensor> tensors{t};
    context.process_group()->allreduce(tensors)->wait();
    sums[rank] = t.cpu();
    recorded[rank] = context.trace()->snapshot().entries.size();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(sums[r].eq(3.0f).all().item<bool>()) << "rank " << r;
    EXPECT_GE(recorded[r], 1u) << "the NCCL all-reduce is in the collective record";
  }
}

// Two ranks on one GPU through Gloo (staging in host memory): DDP's gradients equal one
// process's on the whole batch.
TEST(GlooCudaTest, TwoRanksSharingOneGpuMatchOneProcess) {
  if (torch::cuda::device_count() < 1)
    GTEST_SKIP() << "needs a visible GPU, this process sees none";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  auto x = torch::randn({8, 16}).to(gpu), y = torch::randn({8, 4}).to(gpu);
  torch::nn::Linear reference(16, 4);
  reference->to(gpu);
  (reference(x) - y).pow(2).mean().backward();
  const auto expected = reference->weight.grad().cpu();

  InitOptions options;
  options.backend = BackendChoice::kGloo;
  std::vector<torch::Tensor> grads(2);
  run_ranks(2, options, [&](int rank, Context& context) {
    torch::nn::Linear model(16, 4);
    torch::NoGradGuard no_grad;
    model->weight.copy_(reference->weight.cpu());
    model->bias.copy_(reference->bias.cpu());
    model->to(gpu);
    DistributedDataParallel ddp(torch::nn::AnyModule(model), context);
    torch::AutoGradMode grad(true);
    auto xs = x.narrow(0, rank * 4, 4), ys = y.narrow(0, rank * 4, 4);
    (ddp.forward(xs) - ys).pow(2).mean().backward();
    grads[rank] = model->weight.grad().cpu();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(grads[r].defined());
    EXPECT_LE((grads[r] - expected).abs().max().item<float>(), 1e-5) << "rank " << r;
  }
}

}  // namespace
}  // namespace ddpx::dist
