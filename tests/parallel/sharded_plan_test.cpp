// The sharded plan (parallel/sharded/sharded_plan.h) against the data-parallel plan: with one
// seed and the same global batches, ZeRO-1/2/3 end 20 steps with DDP's parameters and
// momentum, on 2 and 4 ranks (each rank a real member of a Gloo group on 127.0.0.1, with the
// shared-memory transport, whose all-gathers copy the shards in place, and without it), for a
// model without BatchNorm and one with it, with and without gradient accumulation; their
// state_dict() is the whole state and loads at another world size and shard mode; ZeRO-3 holds
// no whole parameter between steps; the collective record counts 2 Psi a step for ZeRO-1/2 and
// 3 Psi for ZeRO-3.
//
// Tolerance: 1e-6 relative (plus 1e-7 absolute for values near zero). DDP sums a bucket's
// gradients with one all-reduce, the sharded plan with a reduce-scatter per unit: on 2 ranks
// both add the same two numbers, on 4 the order of sums may differ.
#include "parallel/sharded/sharded_plan.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <sstream>

#include "core/error.h"
#include "distributed/ranks.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/sharded/units.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

using parallel::ShardMode;
using test::error_text;
using test::run_ranks;

// No BatchNorm; 30 and 5 rows do not divide by 4 ranks (padded shards).
struct ShardedMlpImpl : torch::nn::Module {
  ShardedMlpImpl() {
    body = register_module("body",
                           torch::nn::Sequential(torch::nn::Linear(8, 30), torch::nn::Tanh(),
                                                 torch::nn::Linear(30, 16), torch::nn::Tanh()));
    head = register_module("head", torch::nn::Linear(16, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return head(body->forward(x)); }
  torch::nn::Sequential body{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ShardedMlp);

// With BatchNorm (its own unit) and a root fc.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    features = register_module(
        "features",
        torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 6, 3)),
                              torch::nn::BatchNorm2d(6), torch::nn::ReLU(),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 10, 3).stride(2))));
    fc = register_module("fc", torch::nn::Linear(10, 5));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc(torch::adaptive_avg_pool2d(features->forward(x), {1, 1}).flatten(1));
  }
  torch::nn::Sequential features{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ConvNet);

// Three Linear units and no root parameters.
struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    seq = register_module("seq", torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::Tanh(),
                                                       torch::nn::Linear(32, 16), torch::nn::Tanh(),
                                                       torch::nn::Linear(16, 4)));
  }
  torch::Tensor forward(torch::Tensor x) { return seq->forward(x); }
  torch::nn::Sequential seq{nullptr};
};
TORCH_MODULE(Chain);

enum class Model { kMlp, kConvNet };

torch::nn::AnyModule make_sharded_model(Model m) {
  torch::manual_seed(3);
  if (m == Model::kMlp) return torch::nn::AnyModule(ShardedMlp());
  return torch::nn::AnyModule(ConvNet());
}

std::unique_ptr<torch::optim::Optimizer> make_sharded_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
}

std::unique_ptr<torch::optim::Optimizer> make_adam(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::Adam>(params,
                                              torch::optim::AdamOptions(0.01).weight_decay(1e-3));
}

struct ShardedBatches {
  std::vector<torch::Tensor> x, y;
};

ShardedBatches sharded_batches(Model m, int steps) {
  ShardedBatches b;
  torch::manual_seed(11);
  for (int s = 0; s < steps; ++s) {
    b.x.push_back(m == Model::kMlp ? torch::randn({8, 8}) : torch::randn({8, 3, 9, 9}));
    b.y.push_back(torch::randn({8, 5}));
  }
  return b;
}

// Bytes of the plan's full state: the model's and the optimizer's archives.
struct Saved {
  std::string model, optimizer;
};

Saved save(parallel::Plan& plan) {
  torch::serialize::OutputArchive m, o;
  plan.state_dict(m, o);
  std::ostringstream mb, ob;
  m.save_to(mb);
  o.save_to(ob);
  return {mb.str(), ob.str()};
}

void load(parallel::Plan& plan, const Saved& saved) {
  torch::serialize::InputArchive m, o;
  std::istringstream ms(saved.model), os(saved.optimizer);
  m.load_from(ms);
  o.load_from(os);
  plan.load_state_dict(m, o);
}

// The saved state in a plain model and optimizer: every parameter, then every state tensor.
std::vector<torch::Tensor> read_back_sharded(Model model, const Saved& saved, bool adam) {
  auto fresh = make_sharded_model(model);
  auto params = fresh.ptr()->parameters();
  auto optimizer = adam ? make_adam(params) : make_sharded_sgd(params);
  torch::serialize::InputArchive m, o;
  std::istringstream ms(saved.model), os(saved.optimizer);
  m.load_from(ms);
  o.load_from(os);
  fresh.ptr()->load(m);
  optimizer->load(o);
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  for (const auto& p : params) {
    auto& state = *optimizer->state().at(p.unsafeGetTensorImpl());
    if (adam) {
      auto& s = static_cast<torch::optim::AdamParamState&>(state);
      out.push_back(s.exp_avg().clone());
      out.push_back(s.exp_avg_sq().clone());
    } else {
      out.push_back(static_cast<torch::optim::SGDParamState&>(state).momentum_buffer().clone());
    }
  }
  return out;
}

// `built`: the model, made before the ranks' threads start: torch::manual_seed seeds one
// generator for the whole process, so models made on several threads at once would draw each
// other's numbers.
std::unique_ptr<parallel::Plan> make_plan(ShardMode mode, torch::nn::AnyModule built,
                                          Context& context, bool adam) {
  parallel::OptimizerFactory factory = adam ? make_adam : make_sharded_sgd;
  if (mode == ShardMode::kNone) {
    return std::make_unique<parallel::DataParallelPlan>(built, context, factory,
                                                        parallel::DataParallelOptions{});
  }
  parallel::ShardedOptions options;
  options.mode = mode;
  return std::make_unique<parallel::ShardedPlan>(built, context, factory, options);
}

std::vector<torch::nn::AnyModule> make_models(Model model, int world) {
  std::vector<torch::nn::AnyModule> out;
  for (int r = 0; r < world; ++r) out.push_back(make_sharded_model(model));
  return out;
}

// One step of the global batch `s`: this rank's slice, in `accumulation` micro-batches.
void train_step(parallel::Plan& plan, const ShardedBatches& b, int s, int rank, int world,
                int accumulation) {
  const int64_t n = 8 / world / accumulation;
  for (int k = 0; k < accumulation; ++k) {
    parallel::MicroBatch mb;
    mb.learning_rate = 0.05;
    const int64_t start = (rank * accumulation + k) * n;
    mb.input = b.x[s].narrow(0, start, n);
    mb.target = b.y[s].narrow(0, start, n);
    mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
      return (out - y).pow(2).mean();
    };
    mb.backward_root = [accumulation](const torch::Tensor& loss) { return loss / accumulation; };
    plan.forward_backward(mb, /*sync=*/k == accumulation - 1);
  }
  plan.step();
  plan.zero_grad();
}

struct Trained {
  std::vector<Saved> saved;  // per rank
  std::vector<std::string> descriptions;
};

Trained train_sharded(ShardMode mode, Model model, int world, int steps, int accumulation = 1,
                      bool adam = false, Transport transport = Transport::kAuto) {
  const ShardedBatches b = sharded_batches(model, steps);
  Trained run;
  run.saved.resize(world);
  run.descriptions.resize(world);
  auto models = make_models(model, world);
  auto errors = run_ranks(
      world,
      [&](int rank, Context& context) {
        auto plan = make_plan(mode, models[rank], context, adam);
        run.descriptions[rank] = plan->describe();
        for (int s = 0; s < steps; ++s) train_step(*plan, b, s, rank, world, accumulation);
        run.saved[rank] = save(*plan);
      },
      std::chrono::seconds(20), transport);
  EXPECT_ALL_RANKS_OK(errors);
  return run;
}

void expect_same_state(const std::vector<torch::Tensor>& got,
                       const std::vector<torch::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << " #" << i;
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-6, 1e-7))
        << what << " #" << i << ": largest difference "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

struct Case {
  ShardMode mode;
  Model model;
  int world;
  int accumulation;
  // kAuto: the shared-memory transport, whose arena holds the shards, so every all-gather
  // copies them in place; kGloo: all-gathers into a buffer, then out of it.
  Transport transport = Transport::kAuto;
};

class ShardedPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedPlanTest, TwentyStepsEndWithDdpsParametersAndMomentum) {
  const Case c = GetParam();
  const Trained ddp = train_sharded(ShardMode::kNone, c.model, c.world, 20, c.accumulation);
  const Trained sharded =
      train_sharded(c.mode, c.model, c.world, 20, c.accumulation, false, c.transport);
  const auto want = read_back_sharded(c.model, ddp.saved[0], false);
  // The weights moved from their initial values.
  EXPECT_FALSE(torch::allclose(want[0], make_sharded_model(c.model).ptr()->parameters()[0]));
  for (int rank = 0; rank < c.world; ++rank) {
    expect_same_state(read_back_sharded(c.model, sharded.saved[rank], false), want,
                      "rank " + std::to_string(rank));
  }
  EXPECT_NE(sharded.descriptions[0].find(std::string("--shard ") + parallel::name(c.mode)),
            std::string::npos)
      << sharded.descriptions[0];
  EXPECT_EQ(sharded.descriptions[0].find("straight from shared memory") != std::string::npos,
            c.transport == Transport::kAuto)
      << sharded.descriptions[0];
  // ZeRO-1/2 on shared memory keep the parameters there, the shards their own rows.
  EXPECT_EQ(sharded.descriptions[0].find("each rank's shards their own rows") != std::string::npos,
            c.transport == Transport::kAuto && c.mode != ShardMode::kFull)
      << sharded.descriptions[0];
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ShardedPlanTest,
    ::testing::Values(Case{ShardMode::kOptimizer, Model::kMlp, 2, 1},
                      Case{ShardMode::kGradients, Model::kMlp, 2, 1},
                      Case{ShardMode::kFull, Model::kMlp, 2, 1},
                      Case{ShardMode::kFull, Model::kMlp, 4, 1},
                      Case{ShardMode::kGradients, Model::kMlp, 4, 2},
                      Case{ShardMode::kFull, Model::kMlp, 2, 2},
                      Case{ShardMode::kOptimizer, Model::kConvNet, 4, 1},
                      Case{ShardMode::kFull, Model::kConvNet, 2, 1},
                      Case{ShardMode::kFull, Model::kConvNet, 4, 2},
                      Case{ShardMode::kOptimizer, Model::kMlp, 2, 1, Transport::kGloo},
                      Case{ShardMode::kFull, Model::kMlp, 4, 2, Transport::kGloo}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(parallel::name(info.param.mode)) +
             (info.param.model == Model::kMlp ? "_mlp_" : "_convnet_") +
             std::to_string(info.param.world) + "ranks" +
             (info.param.accumulation > 1 ? "_accumulating" : "") +
             (info.param.transport == Transport::kGloo ? "_gloo" : "");
    });

// ZeRO-1 on the shared-memory transport keeps each unit's parameters in shared memory: every
// shard is this rank's rows of its parameter (a step on the shard is a step on the parameter),
// and a checkpoint part carries those rows alone, not the whole unit they are views of: it is
// the size of the part written over Gloo, whose shards lie in a buffer of their own.
TEST(ShardedResidentTest, ShardsAreTheParametersOwnRowsAndPartsCarryOnlyThem) {
  std::map<Transport, std::vector<size_t>> part_bytes;
  for (Transport transport : {Transport::kAuto, Transport::kGloo}) {
    auto models = make_models(Model::kMlp, 4);
    part_bytes[transport].resize(4);
    auto errors = run_ranks(
        4,
        [&](int rank, Context& context) {
          auto plan = make_plan(ShardMode::kOptimizer, models[rank], context, false);
          auto& sharded = dynamic_cast<parallel::ShardedPlan&>(*plan);
          for (const auto& unit : sharded.units()) {
            EXPECT_EQ(unit.resident(), transport == Transport::kAuto) << unit.name();
            if (!unit.resident()) continue;
            for (size_t i = 0; i < unit.params().size(); ++i) {
              const auto& shape = unit.shapes()[i];
              if (shape.real_rows(rank) == 0) continue;
              const auto rows = unit.params()[i]
                                    .detach()
                                    .view({shape.rows, -1})
                                    .narrow(0, rank * shape.rows_per_rank, shape.real_rows(rank));
              EXPECT_EQ(unit.shards()[i].data_ptr(), rows.data_ptr()) << unit.param_names()[i];
              torch::NoGradGuard no_grad;
              unit.shards()[i].add_(1.0);  // through the shard, into the parameter
              EXPECT_TRUE(torch::equal(rows, unit.shards()[i]
                                                 .view({shape.rows_per_rank, -1})
                                                 .narrow(0, 0, shape.real_rows(rank))))
                  << unit.param_names()[i];
            }
          }
          torch::serialize::OutputArchive part;
          plan->write_part(part);
          std::stringstream bytes;
          part.save_to(bytes);
          torch::serialize::InputArchive back;
          back.load_from(bytes);
          for (const auto& key : back.keys()) {
            if (key.empty() || key[0] != 'p') continue;
            torch::Tensor rows;
            back.read(key, rows);
            EXPECT_EQ(rows.storage().nbytes(), rows.numel() * rows.element_size())
                << "rank " << rank << " " << key << " was written with a larger buffer";
            part_bytes[transport][rank] += rows.storage().nbytes();
          }
        },
        std::chrono::seconds(20), transport);
    EXPECT_ALL_RANKS_OK(errors);
  }
  EXPECT_EQ(part_bytes[Transport::kAuto], part_bytes[Transport::kGloo]);
}

// A checkpoint of ZeRO-3 on 2 ranks (Adam: moments and step) loads into 3 ranks of ZeRO-2 and
// into 4 of ZeRO-1, whose state_dict() gives it back unchanged; and 5 more steps from it on 4
// ranks of ZeRO-1 end where 5 more steps on the 2 ranks of ZeRO-3 do.
TEST(ShardedCheckpointTest, LoadsAtAnotherWorldSizeAndShardMode) {
  const ShardedBatches b = sharded_batches(Model::kMlp, 10);
  Saved at5, at10;
  auto models = make_models(Model::kMlp, 2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    auto plan = make_plan(ShardMode::kFull, models[rank], context, /*adam=*/true);
    for (int s = 0; s < 5; ++s) train_step(*plan, b, s, rank, 2, 1);
    Saved saved = save(*plan);
    for (int s = 5; s < 10; ++s) train_step(*plan, b, s, rank, 2, 1);
    Saved end = save(*plan);
    if (rank == 0) at5 = saved, at10 = end;
  });
  EXPECT_ALL_RANKS_OK(errors);
  const auto want5 = read_back_sharded(Model::kMlp, at5, true);

  std::vector<Saved> reloaded(3);
  models = make_models(Model::kMlp, 3);
  errors = run_ranks(3, [&](int rank, Context& context) {
    auto plan = make_plan(ShardMode::kGradients, models[rank], context, true);
    load(*plan, at5);
    reloaded[rank] = save(*plan);
  });
  EXPECT_ALL_RANKS_OK(errors);
  expect_same_state(read_back_sharded(Model::kMlp, reloaded[0], true), want5, "3 ranks of ZeRO-2");

  std::vector<Saved> continued(4);
  models = make_models(Model::kMlp, 4);
  errors = run_ranks(4, [&](int rank, Context& context) {
    auto plan = make_plan(ShardMode::kOptimizer, models[rank], context, true);
    load(*plan, at5);
    for (int s = 5; s < 10; ++s) train_step(*plan, b, s, rank, 4, 1);
    continued[rank] = save(*plan);
  });
  EXPECT_ALL_RANKS_OK(errors);
  // Adam divides by sqrt of second moments: allow for 4 ranks' order of sums over 5 steps.
  const auto got = read_back_sharded(Model::kMlp, continued[0], true);
  const auto want = read_back_sharded(Model::kMlp, at10, true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-6)) << "#" << i;
  }
}

// Between steps ZeRO-3 keeps no whole parameter: every parameter's storage is released (its
// bytes handed back), only the shards stay; ZeRO-2 keeps them whole but drops whole gradients.
TEST(ShardedMemoryTest, FullShardingHoldsNoWholeParameterBetweenSteps) {
  const ShardedBatches b = sharded_batches(Model::kMlp, 2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::ShardedOptions options;
    options.mode = ShardMode::kFull;
    parallel::ShardedPlan full(make_sharded_model(Model::kMlp), context, make_sharded_sgd, options);
    options.mode = ShardMode::kGradients;
    parallel::ShardedPlan grads(make_sharded_model(Model::kMlp), context, make_sharded_sgd,
                                options);
    for (int s = 0; s < 2; ++s) {
      train_step(full, b, s, rank, 2, 1);
      parallel::MicroBatch mb;
      mb.input = b.x[s].narrow(0, rank * 4, 4);
      mb.target = b.y[s].narrow(0, rank * 4, 4);
      mb.loss = [](const torch::Tensor& o, const torch::Tensor& y) {
        return (o - y).pow(2).mean();
      };
      grads.forward_backward(mb, true);
      for (const auto& unit : grads.units()) {
        for (const auto& p : unit.params()) EXPECT_FALSE(p.grad().defined()) << unit.name();
      }
      grads.step();
      grads.zero_grad();
    }
    int64_t shard_elements = 0, whole_elements = 0;
    for (const auto& unit : full.units()) {
      EXPECT_FALSE(unit.gathered()) << unit.name();
      for (const auto& p : unit.params()) {
        EXPECT_EQ(p.storage().nbytes(), 0u) << unit.name();
        whole_elements += p.numel();
      }
      shard_elements += unit.shard_numel();
    }
    // Each rank's shards are half the model, plus padding rows.
    EXPECT_LE(shard_elements, whole_elements / 2 + 5 * 16);
    // module() gathers the whole model (FSDP's summon_full_params): each rank evaluates as
    // many batches as it has, without communicating.
    torch::NoGradGuard no_grad;
    auto& whole = full.module();
    for (const auto& unit : full.units()) EXPECT_TRUE(unit.gathered()) << unit.name();
    auto out = whole.forward(b.x[0].narrow(0, 0, rank == 0 ? 8 : 3));
    if (rank == 0) out = whole.forward(b.x[1]);
    EXPECT_EQ(out.size(1), 5);
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  });
  EXPECT_ALL_RANKS_OK(errors);
}

// The collective record counts what a strategy must send: a step of ZeRO-1 or ZeRO-2 moves Psi
// (the parameter bytes) by reduce-scatter and Psi by all-gather, 2 Psi in all, as DDP's
// all-reduce; ZeRO-3 moves Psi by reduce-scatter and 2 Psi by all-gather (each unit gathered
// for forward and again for backward), 3 Psi. Rows divide by the 2 ranks (no padding) and
// every unit's weight is read in backward (the input requires grad), so the counts are exact.
// One step of the Chain on a random batch of 4 whose input requires grad (so every unit's weight
// is read in backward), drawn from `gen`: ranks run as threads, and the global generator would
// hand them numbers in whatever order they ask.
void chain_step(parallel::Plan& plan, at::Generator& gen) {
  parallel::MicroBatch mb;
  mb.input = torch::randn({4, 8}, gen).requires_grad_(true);
  mb.target = torch::randn({4, 4}, gen);
  mb.loss = [](const torch::Tensor& o, const torch::Tensor& y) { return (o - y).pow(2).mean(); };
  plan.forward_backward(mb, true);
  plan.step();
  plan.zero_grad();
}

TEST(ShardedTrafficTest, TheRecordCountsTwoPsiForZeroOneAndTwoAndThreePsiForZeroThree) {
  auto make = [] {
    torch::manual_seed(3);
    return torch::nn::AnyModule(Chain());
  };
  const int64_t psi = (8 * 32 + 32 + 32 * 16 + 16 + 16 * 4 + 4) * 4;
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    std::vector<std::map<std::string, int64_t>> bytes(2);
    auto errors = run_ranks(2, [&](int rank, Context& context) {
      ASSERT_NE(context.trace(), nullptr);
      parallel::ShardedOptions options;
      options.mode = mode;
      parallel::ShardedPlan plan(make(), context, make_sharded_sgd, options);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(5 + rank);
      auto step = [&] { chain_step(plan, gen); };
      step();  // the first step records the units' order (prefetch starts with the second)
      const uint64_t before = context.trace()->snapshot().entries.back().seq;
      step();
      for (const auto& e : context.trace()->snapshot().entries) {
        if (e.seq > before) bytes[rank][e.sig.op] += e.sig.bytes();
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
    for (int rank = 0; rank < 2; ++rank) {
      auto& b = bytes[rank];
      const int64_t gathered = b["allgather_into_tensor"], scattered = b["reduce_scatter_tensor"];
      EXPECT_EQ(scattered, psi) << parallel::name(mode) << " rank " << rank;
      EXPECT_EQ(gathered, (mode == ShardMode::kFull ? 2 : 1) * psi)
          << parallel::name(mode) << " rank " << rank;
      int64_t other = 0;
      for (const auto& [op, n] : b) {
        if (op != "allgather_into_tensor" && op != "reduce_scatter_tensor") other += n;
      }
      EXPECT_EQ(other, 0) << parallel::name(mode) << ": nothing else is sent";
    }
  }
}

// Low-precision all-gathers (FSDP's param_dtype): with bf16 gathers, ZeRO-1 sends Psi / 2 by
// all-gather and ZeRO-3 Psi (two gathers of Psi / 2), the reduce-scatter still Psi in fp32; the
// optimizer steps fp32 shards, so training follows the fp32-gather run to bf16's rounding of the
// weights, and a checkpoint's state is gathered in full precision (the shards' exact values).
TEST(ShardedTrafficTest, Bf16AllGathersSendHalfTheBytesAndTheShardsStayFp32) {
  auto make = [] {
    torch::manual_seed(3);
    return torch::nn::AnyModule(Chain());
  };
  const int64_t psi = (8 * 32 + 32 + 32 * 16 + 16 + 16 * 4 + 4) * 4;
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kFull}) {
    std::map<c10::ScalarType, std::vector<torch::Tensor>> final_params;  // rank 0's, by gather
    for (c10::ScalarType gather : {c10::ScalarType::Undefined, c10::ScalarType::BFloat16}) {
      std::vector<std::map<std::string, int64_t>> bytes(2);
      std::vector<std::string> described(2);
      // Built here, one after the other: the threads would share the global generator.
      std::vector<torch::nn::AnyModule> models{make(), make()};
      auto errors = run_ranks(2, [&](int rank, Context& context) {
        parallel::ShardedOptions options;
        options.mode = mode;
        options.gather_dtype = gather;
        parallel::ShardedPlan plan(models[rank], context, make_sharded_sgd, options);
        described[rank] = plan.describe();
        auto gen = at::make_generator<at::CPUGeneratorImpl>(5 + rank);
        auto step = [&] { chain_step(plan, gen); };
        step();
        const uint64_t before = context.trace()->snapshot().entries.back().seq;
        step();
        for (const auto& e : context.trace()->snapshot().entries) {
          if (e.seq > before) bytes[rank][e.sig.op] += e.sig.bytes();
        }
        for (int s = 0; s < 4; ++s) step();
        for (const auto& unit : plan.units())
          for (const auto& shard : unit.shards()) EXPECT_EQ(shard.scalar_type(), torch::kFloat);
        // A checkpoint's state is gathered in full precision: the shards' values, not bf16's.
        torch::serialize::OutputArchive model_archive, optimizer_archive;
        plan.state_dict(model_archive, optimizer_archive);
        std::vector<torch::Tensor> whole;
        for (const auto& p : plan.module().ptr()->parameters()) whole.push_back(p.detach().clone());
        if (rank == 0) final_params[gather] = whole;
        for (size_t u = 0; u < plan.units().size(); ++u) {
          const auto& unit = plan.units()[u];
          for (size_t i = 0; i < unit.params().size(); ++i) {
            auto mine = parallel::take_shard(unit.params()[i].detach(), unit.shapes()[i], rank);
            EXPECT_TRUE(torch::equal(mine, unit.shards()[i].detach()))
                << unit.param_names()[i] << ": state_dict() gathers the fp32 shards' values";
          }
        }
      });
      EXPECT_ALL_RANKS_OK(errors);
      const bool low = gather == c10::ScalarType::BFloat16;
      for (int rank = 0; rank < 2; ++rank) {
        auto& b = bytes[rank];
        EXPECT_EQ(b["reduce_scatter_tensor"], psi) << parallel::name(mode);
        EXPECT_EQ(b["allgather_into_tensor"],
                  (mode == ShardMode::kFull ? 2 : 1) * psi / (low ? 2 : 1))
            << parallel::name(mode) << (low ? " bf16" : " fp32") << " gathers, rank " << rank;
        EXPECT_EQ(described[rank].find("all-gathers in BFloat16") != std::string::npos, low)
            << described[rank];
      }
    }
    const auto& a = final_params[c10::ScalarType::Undefined];
    const auto& b = final_params[c10::ScalarType::BFloat16];
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 2e-2, 2e-3))
          << parallel::name(mode) << " #" << i << ": bf16 gathers follow the fp32 run, largest "
          << "difference " << (a[i] - b[i]).abs().max().item<double>();
    }
  }
}

TEST(ShardedUnitsTest, UnitsFollowContainersAndNamesAreChecked) {
  auto model = make_sharded_model(Model::kConvNet);
  auto units = parallel::choose_units(*model.ptr(), {});
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  EXPECT_EQ(names, (std::vector<std::string>{"features.0", "features.1", "features.3", "root"}));
  EXPECT_EQ(units.back().param_names, (std::vector<std::string>{"fc.weight", "fc.bias"}));

  auto named = parallel::choose_units(*model.ptr(), {"features"});
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].param_names.size(), 6u);

  try {
    parallel::choose_units(*model.ptr(), {"featurs"});
    FAIL() << "an unknown unit name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("'featurs' is no submodule"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("features, fc"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parallel::choose_units(*model.ptr(), {"features", "features.0"}), Error);
}

}  // namespace
}  // namespace ddpx::dist
