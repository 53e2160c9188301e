// The weights' moving average (train/ema.h) kept where the parameters are: under ZeRO-3 (two
// ranks, each averaging its shards), a pipeline of two stages (each rank its stage) and a
// pipeline of two stages whose two replicas shard them (four ranks), the average assembled
// whole equals the one process's average on the same global batches, and so do the weights
// after training goes on past an assembly (the weights swapped back exactly); a step with the
// EMA update moves only the plan's own collectives (the collective record: ZeRO-3's 2Ψ
// all-gathered and Ψ reduce-scattered, a pipeline's point-to-point sends and no broadcast);
// and the average loaded from a whole checkpoint's model comes back cut into the same shards.
// Each rank is a real member of a Gloo group on 127.0.0.1.
//
// Tolerance: 1e-6 relative (plus 1e-7 absolute): two ranks' halves of the batch, or a
// pipeline's micro-batches, are summed in another order than one process's batch.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <map>
#include <string>

#include "distributed/context.h"
#include "distributed/ranks.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/sharded/sharded_plan.h"
#include "trace/collective_trace.h"
#include "train/ema.h"

namespace ddpx::train {
namespace {

using test::run_ranks;

constexpr int kEmaSteps = 5;
constexpr int64_t kEmaBatch = 8;   // global
constexpr int kAssembleAfter = 2;  // steps; training goes on after the average is assembled
constexpr double kEmaDecay = 0.9;

torch::nn::Sequential make_ema_layers() {
  torch::manual_seed(5);
  return torch::nn::Sequential(torch::nn::Linear(6, 24), torch::nn::Tanh(),
                               torch::nn::Linear(24, 24), torch::nn::Tanh(),
                               torch::nn::Linear(24, 4));
}

// The same layers as a module AnyModule takes (a Sequential's forward is a template): the same
// parameters in the same order.
struct EmaNetImpl : torch::nn::Module {
  explicit EmaNetImpl(torch::nn::Sequential l) : layers(register_module("layers", std::move(l))) {}
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers;
};
TORCH_MODULE(EmaNet);

EmaNet make_ema_net() { return EmaNet(make_ema_layers()); }
constexpr int64_t kEmaPsiBytes = (6 * 24 + 24 + 24 * 24 + 24 + 24 * 4 + 4) * 4;

std::unique_ptr<torch::optim::Optimizer> make_ema_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

struct EmaBatches {
  std::vector<torch::Tensor> x, y;
};

EmaBatches ema_batches() {
  EmaBatches b;
  torch::manual_seed(17);
  for (int s = 0; s < kEmaSteps; ++s) {
    b.x.push_back(torch::randn({kEmaBatch, 6}));
    b.y.push_back(torch::randn({kEmaBatch, 4}));
  }
  return b;
}

struct EmaLayout {
  std::string name;
  int world;
  int replicas;  // the global batch is split over them
  std::function<std::unique_ptr<parallel::Plan>(EmaNet, dist::Context&)> make;
};

// What a run leaves: the assembled average after kAssembleAfter steps and at the end, the
// final weights, and rank 0's bytes by collective during the last step and its EMA update.
struct EmaRun {
  std::vector<torch::Tensor> early_average, average, weights;
  std::map<std::string, int64_t> last_step_bytes;
};

std::vector<torch::Tensor> ema_copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

// Which part of the global batch the rank reads: a pipeline's stages share their replica's.
int ema_replica_of(parallel::Plan& plan, int rank) {
  if (auto* pipeline = dynamic_cast<parallel::PipelinePlan*>(&plan)) return pipeline->replica();
  return rank;
}

EmaRun train_with_ema(const EmaLayout& layout) {
  const EmaBatches b = ema_batches();
  std::vector<EmaNet> nets;
  for (int r = 0; r < layout.world; ++r) nets.push_back(make_ema_net());
  EmaRun run;
  auto errors = run_ranks(layout.world, [&](int rank, dist::Context& context) {
    auto plan = layout.make(nets[rank], context);
    ModelEma ema(held_tensors(*plan), kEmaDecay);
    auto whole = torch::nn::AnyModule(make_ema_net());
    const int replica = ema_replica_of(*plan, rank);
    const int64_t n = kEmaBatch / layout.replicas;
    for (int s = 0; s < kEmaSteps; ++s) {
      const uint64_t before =
          context.trace() != nullptr && !context.trace()->snapshot().entries.empty()
              ? context.trace()->snapshot().entries.back().seq
              : 0;
      parallel::MicroBatch mb;
      mb.learning_rate = 0.1;
      mb.input = b.x[s].narrow(0, replica * n, n);
      mb.target = b.y[s].narrow(0, replica * n, n);
      mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
        return (out - y).pow(2).mean();
      };
      plan->forward_backward(mb, /*sync=*/true);
      plan->step();
      plan->zero_grad();
      ema.update(held_tensors(*plan));
      if (s == kEmaSteps - 1 && rank == 0 && context.trace() != nullptr) {
        for (const auto& e : context.trace()->snapshot().entries)
          if (e.seq > before) run.last_step_bytes[e.sig.op] += e.sig.bytes();
      }
      if (s + 1 == kAssembleAfter) {
        ema.assemble(*plan, *whole.ptr());
        if (rank == 0) run.early_average = ema_copies(module_tensors(*whole.ptr()));
      }
    }
    ema.assemble(*plan, *whole.ptr());
    auto weights = ema_copies(module_tensors(*plan->module().ptr()));
    if (rank == 0) {
      run.average = ema_copies(module_tensors(*whole.ptr()));
      run.weights = weights;
    }
  });
  for (int r = 0; r < layout.world; ++r) EXPECT_EQ(test::error_text(errors[r]), "") << r;
  return run;
}

void expect_ema_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << " #" << i;
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-6, 1e-7))
        << what << " #" << i << ": largest difference "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

EmaLayout ema_one_process() {
  return {"one process", 1, 1, [](EmaNet net, dist::Context& context) {
            return std::make_unique<parallel::DataParallelPlan>(
                torch::nn::AnyModule(net), context, make_ema_sgd, parallel::DataParallelOptions{});
          }};
}

EmaLayout ema_zero_three() {
  return {"--shard full over 2", 2, 2, [](EmaNet net, dist::Context& context) {
            parallel::ShardedOptions options;
            options.mode = parallel::ShardMode::kFull;
            options.units = {"layers.0", "layers.2", "layers.4"};  // each Linear its unit
            return std::make_unique<parallel::ShardedPlan>(torch::nn::AnyModule(net), context,
                                                           make_ema_sgd, options);
          }};
}

EmaLayout ema_pipeline(int replicas, parallel::ShardMode shard) {
  return {fmt::format("2 stages x {} replicas, --shard {}", replicas, parallel::name(shard)),
          2 * replicas, replicas, [shard](EmaNet net, dist::Context& context) {
            parallel::PipelineOptions options;
            options.microbatches = 2;
            options.bounds = {0, 3, 5};  // Linear Tanh Linear | Tanh Linear
            options.shard = shard;
            return std::make_unique<parallel::PipelinePlan>(net->layers, context, make_ema_sgd,
                                                            options);
          }};
}

TEST(EmaPlanTest, ZeroThreeAveragesItsShardsToTheOneProcessAverageWithoutGatheringAStep) {
  const EmaRun want = train_with_ema(ema_one_process());
  const EmaRun got = train_with_ema(ema_zero_three());
  expect_ema_close(got.early_average, want.early_average, "the average after 2 steps");
  expect_ema_close(got.average, want.average, "the average at the end");
  expect_ema_close(got.weights, want.weights, "the weights, trained on past an assembly");
  // A step and its EMA update: the units' all-gathers (forward, backward) and reduce-scatter,
  // nothing else: no whole-model gather for the average.
  auto bytes = got.last_step_bytes;
  EXPECT_EQ(bytes["allgather_into_tensor"], 2 * kEmaPsiBytes);
  EXPECT_EQ(bytes["reduce_scatter_tensor"], kEmaPsiBytes);
  bytes.erase("allgather_into_tensor");
  bytes.erase("reduce_scatter_tensor");
  for (const auto& [op, n] : bytes) EXPECT_EQ(n, 0) << op << ": nothing else is sent";
}

TEST(EmaPlanTest, APipelineAveragesEachStageWhereItRunsToTheOneProcessAverage) {
  const EmaRun want = train_with_ema(ema_one_process());
  for (const EmaLayout& layout :
       {ema_pipeline(1, parallel::ShardMode::kNone), ema_pipeline(2, parallel::ShardMode::kFull)}) {
    const EmaRun got = train_with_ema(layout);
    expect_ema_close(got.early_average, want.early_average, layout.name + ": after 2 steps");
    expect_ema_close(got.average, want.average, layout.name + ": at the end");
    expect_ema_close(got.weights, want.weights, layout.name + ": the weights");
    for (const char* op : {"broadcast", "allgather"})
      EXPECT_EQ(got.last_step_bytes.count(op), 0u)
          << layout.name << ": a step with its EMA update sends no stage whole (" << op << ")";
    EXPECT_GT(got.last_step_bytes.size(), 0u) << layout.name << ": the record saw the step";
  }
}

// Resume: the whole average a checkpoint holds (its model archive's layout) comes back into
// each rank's shards, and the plan's own weights stay as they were.
TEST(EmaPlanTest, TheAverageLoadedFromAWholeModelComesBackIntoTheShards) {
  const EmaBatches b = ema_batches();
  std::vector<EmaNet> nets = {make_ema_net(), make_ema_net()};
  auto errors = run_ranks(2, [&](int rank, dist::Context& context) {
    auto plan = ema_zero_three().make(nets[rank], context);
    ModelEma ema(held_tensors(*plan), kEmaDecay);
    for (int s = 0; s < 2; ++s) {
      parallel::MicroBatch mb;
      mb.input = b.x[s].narrow(0, rank * 4, 4);
      mb.target = b.y[s].narrow(0, rank * 4, 4);
      mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
        return (out - y).pow(2).mean();
      };
      plan->forward_backward(mb, true);
      plan->step();
      plan->zero_grad();
      ema.update(held_tensors(*plan));
    }
    auto whole = torch::nn::AnyModule(make_ema_net());
    ema.assemble(*plan, *whole.ptr());
    const auto weights = ema_copies(held_tensors(*plan));
    ModelEma loaded(held_tensors(*plan), kEmaDecay);  // starts at the weights
    loaded.load(*plan, *whole.ptr());
    expect_ema_close(loaded.average(), ema.average(), "rank " + std::to_string(rank) + "'s shards");
    expect_ema_close(held_tensors(*plan), weights, "the plan's own weights after the load");
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(test::error_text(errors[r]), "") << r;
}

}  // namespace
}  // namespace ddpx::train
