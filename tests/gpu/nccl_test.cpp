// The GPU paths of distributed/: NCCL through the traced backend, a world of one on NCCL with its
// group forced (so that a machine with one GPU runs DDP's reducer, ncclAvg, broadcast, barrier
// and the comm hooks through NCCL), and Gloo on CUDA tensors for ranks that share one GPU (NCCL
// refuses two ranks on a device). Label `gpu`: each test skips with a message where this process
// sees too few GPUs (CI has none), so here they only prove that the CUDA and NCCL code compiles
// and links.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <cstdlib>
#include <filesystem>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "distributed/context.h"
#include "distributed/ranks.h"
#include "parallel/data/ddp.h"
#include "parallel/pipeline/pipeline_plan.h"
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
    GTEST_SKIP() << "needs 2 visible GPUs (NCCL refuses two ranks on one GPU; "
                    "WorldOfOneRunsDdpThroughNccl checks NCCL on one), this process sees "
                 << static_cast<int>(torch::cuda::device_count());
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

// One GPU, one rank, the group forced: every NCCL path of DDP runs, and the gradients are the
// plain model's (a world of one averages one rank's gradients; fp16/bf16 compression rounds
// them).
TEST(NcclTest, WorldOfOneRunsDdpThroughNccl) {
  if (torch::cuda::device_count() < 1)
    GTEST_SKIP() << "needs a visible GPU, this process sees none";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(5);
  auto x = torch::randn({8, 16}).to(gpu), y = torch::randn({8, 4}).to(gpu);
  torch::nn::Linear reference(16, 4);
  reference->to(gpu);
  (reference(x) - y).pow(2).mean().backward();
  const auto expected = reference->weight.grad().cpu();

  InitOptions options;
  options.backend = BackendChoice::kNccl;
  options.force_group = true;
  options.timeout = std::chrono::seconds(60);
  run_ranks(1, options, [&](int, Context& context) {
    ASSERT_TRUE(context.distributed());
    EXPECT_EQ(context.backend().rfind("nccl/", 0), 0u) << context.backend();
    for (CommHook hook : {CommHook::kAllreduce, CommHook::kFp16Compress, CommHook::kBf16Compress}) {
      SCOPED_TRACE(name(hook));
      torch::nn::Linear model(16, 4);
      {
        torch::NoGradGuard no_grad;
        model->weight.copy_(reference->weight.cpu());
        model->bias.copy_(reference->bias.cpu());
      }
      model->to(gpu);
      parallel::DdpOptions ddp_options;
      ddp_options.comm_hook = hook;
      ddp_options.first_bucket_bytes = 16;  // two buckets: bias, then weight
      parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), context, ddp_options);
      ASSERT_TRUE(ddp.distributed());
      EXPECT_EQ(ddp.buckets().size(), 2u);
      (ddp.forward(x) - y).pow(2).mean().backward();
      const double tolerance = hook == CommHook::kAllreduce ? 1e-6 : 1e-2;
      EXPECT_LE((model->weight.grad().cpu() - expected).abs().max().item<float>(), tolerance);
    }
    // The context's collectives on GPU tensors go through NCCL too.
    auto t = torch::full({4}, 3.0f, gpu);
    std::vector<torch::Tensor> tensors{t};
    context.process_group()->allreduce(tensors)->wait();
    context.broadcast(t);
    context.barrier();
    EXPECT_TRUE(t.cpu().eq(3.0f).all().item<bool>());
    size_t recorded = context.trace()->snapshot().entries.size();
    EXPECT_GE(recorded, 6u) << "the reducer's NCCL all-reduces are in the collective record";
  });
}

// Two pipeline stages on two GPUs: activations and gradients cross by NCCL send/recv on the
// links between the ranks (pipeline_links.h), on the GPU, under each schedule (interleaved: two
// stages a rank, so the pair carries both ways on four links), and 3 SGD steps end at the single
// process's parameters (on the CPU; 1e-5 relative), with every transfer in the collective record.
// A link whose two ends post in different orders would hang here or mix up micro-batches.
TEST(NcclTest, TwoPipelineStagesOnTwoGpusTradeTensorsByNcclAndTrainAsOneProcess) {
  if (torch::cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 visible GPUs (NCCL refuses two ranks on one GPU), this process sees "
                 << static_cast<int>(torch::cuda::device_count());
  auto make_net = [] {
    torch::manual_seed(11);
    return torch::nn::Sequential(
        torch::nn::Linear(64, 128), torch::nn::Tanh(), torch::nn::Linear(128, 128),
        torch::nn::Tanh(), torch::nn::Linear(128, 64), torch::nn::Tanh(), torch::nn::Linear(64, 8));
  };
  auto sgd = [](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  };
  auto mse = [](const torch::Tensor& o, const torch::Tensor& y) { return (o - y).pow(2).mean(); };
  torch::manual_seed(2);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(torch::randn({8, 64}));
    ys.push_back(torch::randn({8, 8}));
  }
  auto reference = make_net();
  auto reference_sgd = sgd(reference->parameters());
  for (int s = 0; s < 3; ++s) {
    mse(reference->forward(xs[s]), ys[s]).backward();
    reference_sgd->step();
    reference_sgd->zero_grad();
  }
  InitOptions options;
  options.backend = BackendChoice::kNccl;
  options.timeout = std::chrono::seconds(60);
  for (auto schedule : {parallel::PipelineSchedule::kGpipe, parallel::PipelineSchedule::k1F1B,
                        parallel::PipelineSchedule::kInterleaved}) {
    SCOPED_TRACE(name(schedule));
    std::vector<torch::nn::Sequential> nets{make_net(), make_net()};
    run_ranks(2, options, [&](int rank, Context& context) {
      const torch::Device gpu(torch::kCUDA, rank);
      parallel::PipelineOptions pipeline;
      pipeline.microbatches = 4;
      pipeline.schedule = schedule;
      pipeline.stages_per_rank = schedule == parallel::PipelineSchedule::kInterleaved ? 2 : 1;
      pipeline.balance = parallel::PipelineBalance::kParams;
      pipeline.device = gpu;
      parallel::PipelinePlan plan(nets[rank], context, sgd, pipeline);
      EXPECT_NE(plan.describe().find("stage boundaries by NCCL send/recv, on the GPU"),
                std::string::npos)
          << plan.describe();
      const size_t recorded_before = context.trace()->snapshot().entries.size();
      for (int s = 0; s < 3; ++s) {
        parallel::MicroBatch mb;
        mb.input = xs[s].to(gpu);
        mb.target = ys[s].to(gpu);
        mb.loss = mse;
        mb.learning_rate = 0.05;
        plan.forward_backward(mb, true);
        plan.step();
        plan.zero_grad();
      }
      size_t p2p = 0;
      for (const auto& e : context.trace()->snapshot().entries)
        p2p += e.sig.op == "send" || e.sig.op == "recv";
      // Each step: M activations and M gradients over each of the V*2-1 boundaries, each
      // posted once at each end; plus the loss and logits to rank 0.
      const size_t boundaries = pipeline.stages_per_rank * 2 - 1;
      EXPECT_GE(p2p, size_t{3} * 2 * 4 * boundaries) << "rank " << rank;
      EXPECT_GT(context.trace()->snapshot().entries.size(), recorded_before);
      auto got = plan.module().ptr()->parameters();
      auto want = reference->parameters();
      for (size_t i = 0; i < got.size(); ++i) {
        const double scale = want[i].abs().max().item<double>();
        EXPECT_LE((got[i].cpu() - want[i]).abs().max().item<double>(), 1e-5 * scale + 1e-7)
            << "rank " << rank << " parameter " << i;
      }
    });
  }
}

// The case two ranks sharing one GPU train: a linear layer and a batch of 8, on the GPU, the
// same in every process (one seed).
struct SharedGpuCase {
  torch::Tensor x, y;
  torch::nn::Linear reference{nullptr};
};

SharedGpuCase shared_gpu_case(const torch::Device& gpu) {
  torch::manual_seed(3);
  SharedGpuCase c;
  c.x = torch::randn({8, 16}).to(gpu);
  c.y = torch::randn({8, 4}).to(gpu);
  c.reference = torch::nn::Linear(16, 4);
  c.reference->to(gpu);
  return c;
}

// One rank of TwoRanksSharingOneGpuMatchOneProcess, in a process of its own (that test runs this
// binary twice with DDPX_GLOO_CUDA_RANK set); it skips when run alone.
TEST(GlooCudaTest, OneRankOfTwoSharingOneGpu) {
  const char* rank_env = std::getenv("DDPX_GLOO_CUDA_RANK");
  if (rank_env == nullptr)
    GTEST_SKIP() << "a rank of GlooCudaTest.TwoRanksSharingOneGpuMatchOneProcess, run by it";
  const int rank = std::atoi(rank_env);
  const int port = std::atoi(std::getenv("DDPX_GLOO_CUDA_PORT"));
  const std::string out = std::getenv("DDPX_GLOO_CUDA_OUT");
  const torch::Device gpu(torch::kCUDA, 0);
  auto c = shared_gpu_case(gpu);
  InitOptions options;
  options.backend = BackendChoice::kGloo;
  options.timeout = std::chrono::seconds(60);
  auto context = init(test::loopback_world(rank, 2, port), options);
  torch::nn::Linear model(16, 4);
  {
    torch::NoGradGuard no_grad;
    model->weight.copy_(c.reference->weight);
    model->bias.copy_(c.reference->bias);
  }
  model->to(gpu);
  parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), *context);
  auto xs = c.x.narrow(0, rank * 4, 4), ys = c.y.narrow(0, rank * 4, 4);
  (ddp.forward(xs) - ys).pow(2).mean().backward();
  torch::save(model->weight.grad().cpu(), out + "/rank" + std::to_string(rank) + ".pt");
}

// Two ranks on one GPU through Gloo (staging in host memory): DDP's gradients equal one
// process's on the whole batch. The ranks are processes, as `ddpx run 2 --gpus 0,0` makes them:
// as threads of one process they would share autograd's one thread for the GPU, where one rank's
// reducer waits for gradients of the other that are queued behind it.
TEST(GlooCudaTest, TwoRanksSharingOneGpuMatchOneProcess) {
  if (torch::cuda::device_count() < 1)
    GTEST_SKIP() << "needs a visible GPU, this process sees none";
  const torch::Device gpu(torch::kCUDA, 0);
  auto c = shared_gpu_case(gpu);
  (c.reference(c.x) - c.y).pow(2).mean().backward();
  const auto expected = c.reference->weight.grad().cpu();

  test::TempDir dir;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string env = "DDPX_GLOO_CUDA_PORT=" + std::to_string(test::free_port()) +
                          " DDPX_GLOO_CUDA_OUT=" + test::shell_quote(dir.path()) + " ";
  std::string command;
  for (int r = 0; r < 2; ++r)
    command += env + "DDPX_GLOO_CUDA_RANK=" + std::to_string(r) + " " + test::shell_quote(self) +
               " --gtest_filter=GlooCudaTest.OneRankOfTwoSharingOneGpu & p" + std::to_string(r) +
               "=$!; ";
  command += "wait $p0; a=$?; wait $p1; exit $((a | $?))";
  auto ranks = test::run_command(command, 180);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  for (int r = 0; r < 2; ++r) {
    torch::Tensor grad;
    torch::load(grad, dir.file("rank" + std::to_string(r) + ".pt"));
    EXPECT_LE((grad - expected).abs().max().item<float>(), 1e-5) << "rank " << r;
  }
}

}  // namespace
}  // namespace ddpx::dist
