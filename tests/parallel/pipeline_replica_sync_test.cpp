// Pipeline replicas sync their gradients through the gradient-sync seam (gradient_sync.h),
// overlapped with the pipeline's backward: on 4 ranks (2 stages x 2 data-parallel replicas,
// 1F1B and interleaved 1F1B with 2 stages a rank), real members of a Gloo group on 127.0.0.1
// with the shared-memory transport. Whole replicas (reducer.h), buckets capped at a byte (one a
// parameter): every bucket of every stage is launched before the backward that fills it
// returns, while the rest of the pipeline's backward still runs, and after forward_backward()
// each rank's gradients are the mean of its two replicas' gradients (the unsplit model's on each
// replica's half of the batch), in the first step (buckets in reverse parameter order) and after
// the buckets are rebuilt in the order gradients became ready (the second and third), and with
// two unsynchronized halves accumulated before the synchronized one. Sharded replicas
// (unit_reducer.h, --shard gradients and full): each stage's unit is reduce-scattered after the
// schedule (none inside a backward, where its input would lie beside the activations), and
// each shard's gradient is its rows of that mean.
//
// Tolerance: 1e-6 relative (plus 1e-7 absolute): the micro-batches' gradients are summed in
// another order than one batch's.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <set>

#include "distributed/ranks.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/sharded/shard_unit.h"

namespace ddpx::dist::replica_sync_test {  // a name of its own in the unity build
namespace {

using parallel::PipelineSchedule;
using test::run_ranks;

constexpr int kWorld = 4, kStages = 2, kReplicas = kWorld / kStages;
constexpr int64_t kBatch = 16;  // global: 8 a replica
constexpr int kSteps = 3;

torch::nn::Sequential make_net() {
  torch::manual_seed(11);
  return torch::nn::Sequential(
      torch::nn::Linear(6, 20), torch::nn::Tanh(), torch::nn::Linear(20, 20), torch::nn::Tanh(),
      torch::nn::Linear(20, 10), torch::nn::Tanh(), torch::nn::Linear(10, 3));
}

torch::Tensor mse(const torch::Tensor& out, const torch::Tensor& y) {
  return (out - y).pow(2).mean();
}

struct Batches {
  std::vector<torch::Tensor> x, y;
};

Batches batches() {
  torch::manual_seed(23);
  Batches b;
  for (int s = 0; s < kSteps; ++s) {
    b.x.push_back(torch::randn({kBatch, 6}));
    b.y.push_back(torch::randn({kBatch, 3}));
  }
  return b;
}

// The mean over the replicas of the unsplit model's gradients on each replica's rows, by
// parameter of the unsplit model.
std::vector<std::vector<torch::Tensor>> replica_means(const Batches& b) {
  auto net = make_net();
  std::vector<std::vector<torch::Tensor>> means;
  const int64_t n = kBatch / kReplicas;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<torch::Tensor> sum;
    for (int r = 0; r < kReplicas; ++r) {
      net->zero_grad();
      mse(net->forward(b.x[s].narrow(0, r * n, n)), b.y[s].narrow(0, r * n, n)).backward();
      const auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (r == 0) {
          sum.push_back(params[i].grad().clone());
        } else {
          sum[i] += params[i].grad();
        }
      }
    }
    for (auto& g : sum) g /= kReplicas;
    means.push_back(sum);
  }
  return means;
}

struct Layout {
  PipelineSchedule schedule;
  int microbatches;
  int stages_per_rank;
  bool accumulate = false;  // each replica's rows as two halves, the first not synchronized
  parallel::ShardMode shard = parallel::ShardMode::kNone;
};

class PipelineReplicaSyncTest : public ::testing::TestWithParam<Layout> {};

TEST_P(PipelineReplicaSyncTest, BucketsLaunchDuringTheLastBackwardAndAverageTheReplicas) {
  const Layout layout = GetParam();
  const Batches b = batches();
  const auto want = replica_means(b);
  std::vector<torch::nn::Sequential> nets;
  for (int r = 0; r < kWorld; ++r) nets.push_back(make_net());
  auto errors = run_ranks(kWorld, [&](int rank, Context& context) {
    parallel::PipelineOptions options;
    options.stages = kStages;
    options.microbatches = layout.microbatches;
    options.schedule = layout.schedule;
    options.stages_per_rank = layout.stages_per_rank;
    options.first_bucket_bytes = 1;  // a bucket a parameter
    options.bucket_bytes = 1;
    options.shard = layout.shard;
    parallel::PipelinePlan plan(
        nets[rank], context,
        [](std::vector<torch::Tensor> p) {
          return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
        },
        options);
    const bool sharded = layout.shard != parallel::ShardMode::kNone;
    // Sharded: a unit a stage of this rank (each has parameters).
    ASSERT_EQ(plan.units().size(), sharded ? static_cast<size_t>(layout.stages_per_rank) : 0u);
    const auto all = nets[rank]->parameters();
    const std::vector<torch::Tensor> mine = plan.parameters();
    ASSERT_FALSE(mine.empty()) << "rank " << rank;
    // The unsplit model's index of each of this rank's parameters.
    auto index_of = [&](const torch::Tensor& p) {
      size_t i = 0;
      while (i < all.size() && !all[i].is_same(p)) ++i;
      return i;
    };
    const int64_t n = kBatch / kReplicas;
    for (int s = 0; s < kSteps; ++s) {
      parallel::MicroBatch whole;
      whole.input = b.x[s].narrow(0, plan.replica() * n, n);
      whole.target = b.y[s].narrow(0, plan.replica() * n, n);
      whole.loss = mse;
      whole.learning_rate = 0.1;
      if (layout.accumulate) {
        for (int h = 0; h < 2; ++h) {
          parallel::MicroBatch part = whole;
          part.input = whole.input.narrow(0, h * n / 2, n / 2);
          part.target = whole.target.narrow(0, h * n / 2, n / 2);
          part.loss = [](const torch::Tensor& o, const torch::Tensor& y) { return mse(o, y) / 2; };
          plan.forward_backward(part, /*sync=*/h == 1);
        }
      } else {
        plan.forward_backward(whole, /*sync=*/true);
      }
      const parallel::PipelineStats& stats = plan.last_stats();
      // A bucket a parameter: every one launched inside the backward that made its gradients.
      // Sharded: nothing launched inside a backward.
      EXPECT_EQ(stats.sync_buckets, sharded ? 0 : static_cast<int>(mine.size())) << "rank " << rank;
      EXPECT_EQ(stats.sync_buckets_in_backward, stats.sync_buckets)
          << "rank " << rank << " step " << s << ": launched only after the backward";
      if (sharded) {
        // Each shard's gradient: its rows (a ceil(rows / 2) block, zero padded) of the mean.
        for (const auto& unit : plan.units()) {
          for (size_t k = 0; k < unit.params().size(); ++k) {
            const size_t i = index_of(unit.params()[k]);
            ASSERT_LT(i, all.size());
            const torch::Tensor& w = want[s][i];
            const int64_t rows = w.size(0), block = (rows + kReplicas - 1) / kReplicas;
            const int64_t first = plan.replica() * block;
            const int64_t n_rows = std::max<int64_t>(0, std::min(rows - first, block));
            const torch::Tensor grad = unit.shards()[k].grad();
            ASSERT_TRUE(grad.defined()) << "rank " << rank << " parameter " << i;
            const torch::Tensor got = grad.narrow(0, 0, n_rows);
            const double diff = (got - w.narrow(0, first, n_rows)).abs().max().item<double>();
            EXPECT_LE(diff, 1e-6 * w.abs().max().item<double>() + 1e-7)
                << "rank " << rank << " step " << s << " parameter " << i;
          }
        }
        plan.zero_grad();
        continue;
      }
      for (const auto& p : mine) {
        const size_t i = index_of(p);
        ASSERT_LT(i, all.size());
        ASSERT_TRUE(p.grad().defined()) << "rank " << rank << " parameter " << i;
        const torch::Tensor& w = want[s][i];
        const double diff = (p.grad() - w).abs().max().item<double>();
        EXPECT_LE(diff, 1e-6 * w.abs().max().item<double>() + 1e-7)
            << "rank " << rank << " step " << s << " parameter " << i;
      }
      plan.zero_grad();  // no step: the next step's reference is the same model
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineReplicaSyncTest,
    ::testing::Values(Layout{PipelineSchedule::k1F1B, 4, 1},
                      Layout{PipelineSchedule::kInterleaved, 4, 2},
                      Layout{PipelineSchedule::k1F1B, 2, 1, true},
                      Layout{PipelineSchedule::k1F1B, 4, 1, false, parallel::ShardMode::kGradients},
                      Layout{PipelineSchedule::kInterleaved, 4, 2, false,
                             parallel::ShardMode::kFull}),
    [](const auto& info) {
      const Layout& l = info.param;
      return std::string(l.schedule == PipelineSchedule::k1F1B ? "onef1b" : "interleaved") +
             (l.accumulate ? "_accumulated" : "") +
             (l.shard != parallel::ShardMode::kNone ? std::string("_") + parallel::name(l.shard)
                                                    : "");
    });

}  // namespace
}  // namespace ddpx::dist::replica_sync_test
