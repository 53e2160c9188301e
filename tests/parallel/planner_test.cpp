// `ddpx plan`'s parts (parallel/planner/): the allocator count is the tensors' bytes; the per-mode
// arithmetic is ZeRO's formula on exact padded shards; the activation fit measures a real model;
// the recommendation is the least-sharded mode that fits, and when none does, the batch and the
// GPU count it names do fit. (Planner against `bench memory` on real ranks: tests/e2e/plan_test.)
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "core/error.h"
#include "parallel/planner/memory_plan.h"
#include "parallel/planner/tensor_bytes.h"

namespace ddpx::parallel {
namespace {

constexpr double kGiB = 1LL << 30;

TEST(TensorBytesTest, CountsWhatTensorsHoldAndTheirPeak) {
  CpuTensorBytes bytes;
  const int64_t before = bytes.current();
  {
    auto a = torch::empty({1000}, torch::kFloat);  // 4000 bytes
    auto b = torch::empty({250}, torch::kDouble);  // 2000 bytes
    EXPECT_EQ(bytes.current() - before, 6000);
  }
  EXPECT_EQ(bytes.current(), before) << "freed storages are subtracted";
  EXPECT_GE(bytes.peak() - before, 6000);
  bytes.reset_peak();
  EXPECT_EQ(bytes.peak(), bytes.current());
}

// Two units of one 10x3 and one 7x1 parameter, and a root of one 5x2: Psi = 30 + 7 + 10 = 47.
ModelMemory three_units() {
  ModelMemory m;
  m.parameters = 47;
  m.units = {{"a", false, {{10, 3}}}, {"b", false, {{7, 1}}}, {"root", true, {{5, 2}}}};
  m.activation_fixed = 100;
  m.activation_per_sample = 10;
  return m;
}

TEST(MemoryPlanTest, EachModeHoldsZerosFormulaOnPaddedShards) {
  const ModelMemory m = three_units();
  PlanRequest r;
  r.world_size = 4;
  r.batch_size = 3;
  r.optimizer_bytes_per_param = 8;
  // Padded shard elements on 4 ranks: ceil(10/4)*3 + ceil(7/4)*1 + ceil(5/4)*2 = 9 + 2 + 4 = 15.
  const double shard = 15;
  const auto none = predict(m, ShardMode::kNone, r);
  EXPECT_DOUBLE_EQ(none.params + none.grads + none.optimizer, (4 + 4 + 8) * 47.0);
  EXPECT_DOUBLE_EQ(none.transient, 4 * 47.0) << "the bucket rebuild: old and new buckets once";
  EXPECT_DOUBLE_EQ(none.activations, 100 + 10 * 3);
  const auto z1 = predict(m, ShardMode::kOptimizer, r);
  EXPECT_DOUBLE_EQ(z1.params + z1.grads + z1.optimizer, 8 * 47.0 + (4 + 4 + 8) * shard);
  const auto z2 = predict(m, ShardMode::kGradients, r);
  EXPECT_DOUBLE_EQ(z2.params + z2.grads + z2.optimizer, 4 * 47.0 + (4 + 4 + 8) * shard);
  const auto z3 = predict(m, ShardMode::kFull, r);
  EXPECT_DOUBLE_EQ(z3.params + z3.grads + z3.optimizer, (4 + 4 + 8) * shard);
  // ZeRO-3 gathers: the root (padded to 8 x 2) and five of the largest unit (padded to 12 x 3).
  EXPECT_DOUBLE_EQ(z3.transient, 4 * (16 + 5 * 36.0));
  EXPECT_DOUBLE_EQ(z3.activations, none.activations) << "activations do not shard";
  // Beside the activations as backward starts: ZeRO-2 a unit's gradients and their packed copy,
  // ZeRO-3 also the gathered root and the prefetched unit; DDP and ZeRO-1 nothing.
  EXPECT_DOUBLE_EQ(z2.backward_transient, 4 * 2 * 36.0);
  EXPECT_DOUBLE_EQ(z2.peak(), 4 * 47.0 + 16 * shard + std::max(z2.transient, 130 + 4 * 2 * 36.0));
  EXPECT_DOUBLE_EQ(z3.backward_transient, 4 * (16 + 3 * 36.0));
  EXPECT_DOUBLE_EQ(none.backward_transient, 0);
  EXPECT_DOUBLE_EQ(z1.backward_transient, 0);
}

TEST(MemoryPlanTest, RecommendsTheLeastShardedModeThatFits) {
  ModelMemory m = three_units();
  m.parameters = 1'000'000'000;  // ten units of 1e8 elements, 1 GB activations a sample
  m.units.clear();
  for (int u = 0; u < 10; ++u)
    m.units.push_back({"u" + std::to_string(u), false, {{100'000, 1000}}});
  m.units.push_back({"root", true, {}});
  m.activation_fixed = 0;
  m.activation_per_sample = 1e9;
  PlanRequest r;
  r.world_size = 8;
  r.batch_size = 4;
  r.optimizer_bytes_per_param = 8;  // Adam: DDP holds 16 GB of states
  r.reserve = 1 * kGiB;
  r.gpu_memory = 80 * kGiB;
  auto plan = plan_memory(m, r);
  ASSERT_TRUE(plan.recommended.has_value());
  EXPECT_EQ(*plan.recommended, ShardMode::kNone);

  r.gpu_memory = 18 * kGiB;  // DDP's 16 GB + 4 GB of activations do not fit in 17 GiB
  plan = plan_memory(m, r);
  ASSERT_TRUE(plan.recommended.has_value());
  EXPECT_NE(*plan.recommended, ShardMode::kNone);
  EXPECT_FALSE(plan.modes[0].fits);
  EXPECT_TRUE(predict(m, *plan.recommended, r).fits);
  for (const auto& p : plan.modes) {
    if (p.mode == *plan.recommended) break;
    EXPECT_FALSE(p.fits) << name(p.mode) << " fits and is less sharded";
  }
}

TEST(MemoryPlanTest, WhenNothingFitsTheBatchAndGpuCountItNamesFit) {
  ModelMemory m;
  m.parameters = 4'000'000'000;  // Adam on 2 GPUs: 32 GB of sharded states, 20 GB gathered
  m.units = {{"l0", false, {{4000, 250'000}}},
             {"l1", false, {{4000, 250'000}}},
             {"l2", false, {{4000, 250'000}}},
             {"l3", false, {{4000, 250'000}}},
             {"root", true, {{1, 1}}}};
  m.activation_fixed = 0.5 * kGiB;
  m.activation_per_sample = 0.5 * kGiB;
  PlanRequest r;
  r.world_size = 2;
  r.batch_size = 128;  // 64.5 GiB of activations beside 29.8 GiB of ZeRO-3 states
  r.optimizer_bytes_per_param = 8;
  r.gpu_memory = 80 * kGiB;
  const auto plan = plan_memory(m, r);
  EXPECT_FALSE(plan.recommended.has_value());
  ASSERT_GT(plan.full_max_batch, 0);
  PlanRequest smaller = r;
  smaller.batch_size = plan.full_max_batch;
  EXPECT_TRUE(predict(m, ShardMode::kFull, smaller).fits);
  smaller.batch_size = plan.full_max_batch + 1;
  EXPECT_FALSE(predict(m, ShardMode::kFull, smaller).fits) << "the largest batch that fits";
  // (79 - 29.8 - 11.2 - 0.5) GiB / 0.5 GiB a sample: beside the activations as backward starts,
  // three 3.7 GiB units (the running and the prefetched unit gathered, the running one's grads).
  EXPECT_EQ(plan.full_max_batch, 75);
  // Activations and gathered units never shard; the states do: 19 GPUs hold 3.1 GiB of them
  // beside 64.5 + 11.2 GiB.
  EXPECT_EQ(plan.full_min_world, 19);
  {
    PlanRequest wider = r;
    wider.world_size = plan.full_min_world;
    EXPECT_TRUE(predict(m, ShardMode::kFull, wider).fits);
    wider.world_size = plan.full_min_world - 1;
    EXPECT_FALSE(predict(m, ShardMode::kFull, wider).fits);
  }
}

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    body = register_module(
        "body",
        torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)),
                              torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
                              torch::nn::Flatten(), torch::nn::Linear(8, 10)));
  }
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(TinyNet);

TEST(MemoryPlanTest, MeasuresActivationsThatGrowWithTheBatch) {
  torch::manual_seed(0);
  torch::nn::AnyModule model(TinyNet{});
  ProbeOptions o;
  o.image_size = 32;
  o.num_classes = 10;
  o.batch_small = 4;
  const ModelMemory m = measure_model(model, o);
  EXPECT_EQ(m.parameters, 3 * 8 * 9 + 8 + 8 * 10 + 10);
  int64_t in_units = 0;
  for (const auto& unit : m.units)
    for (const auto& p : unit.params) in_units += p.rows * p.row_numel;
  EXPECT_EQ(in_units, m.parameters) << "the units hold every parameter once";
  // The conv's output (8 x 32 x 32 floats a sample) is saved for ReLU's backward at least.
  EXPECT_GE(m.activation_per_sample, 8 * 32 * 32 * 4.0);
  EXPECT_LT(m.activation_per_sample, 8 * 8 * 32 * 32 * 4.0) << "a handful of such tensors";
  EXPECT_GT(m.probe_bytes_large, m.probe_bytes_small);
}

TEST(MemoryPlanTest, SizesParseInBinaryUnitsAndBadOnesNameTheFlag) {
  EXPECT_DOUBLE_EQ(parse_bytes("80G", "--gpu_memory"), 80 * kGiB);
  EXPECT_DOUBLE_EQ(parse_bytes("40GiB", "--gpu_memory"), 40 * kGiB);
  EXPECT_DOUBLE_EQ(parse_bytes("1.5GB", "--gpu_memory"), 1.5 * kGiB);
  EXPECT_DOUBLE_EQ(parse_bytes("81920M", "--gpu_memory"), 80 * kGiB);
  EXPECT_DOUBLE_EQ(parse_bytes("4096", "--reserve"), 4096);
  for (const char* bad : {"80X", "", "G", "-1G", "eighty"}) {
    try {
      parse_bytes(bad, "--gpu_memory");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_NE(std::string(e.what()).find("--gpu_memory"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ddpx::parallel
