// The pipeline plan (parallel/pipeline/) against one process training the unsplit model: with
// one seed and the same global batches, every schedule (GPipe, 1F1B, interleaved 1F1B), on 2
// ranks (2 stages) and 4 (2 stages x 2 data-parallel replicas, 1F1B, interleaved and
// accumulating two unsynchronized halves, and 4 stages), and with the replicas sharding their
// stage (--shard optimizer, gradients and full, on 2 to 4 replicas, one with padded shards, one
// accumulating two unsynchronized halves), ends 6 SGD steps, each clipped
// by the whole model's gradient norm, with the single process's parameters, each step's loss and
// norm reported, each rank holding memory for its own stages' parameters only while it trains and
// evaluates (the trained model's logits on each replica's first rank; --shard full: none between
// steps, a shard of each); its state_dict() is the unsplit model's and optimizer's and loads back
// into a pipeline, sharded or not, and so are its ranks' parts of a checkpoint by stage, written
// without gathering anything; layouts that cannot run are refused on every rank before any
// collective. Each rank is a real member of a Gloo group on 127.0.0.1. The schedules themselves are
// checked by simulation: no deadlock, each forward before its backward, the bubble within 3 points
// of (P-1)/(M+P-1)
// ((P-1)/(V*M+P-1) interleaved), and at most P - rank micro-batches of activations held under 1F1B,
// M under GPipe.
//
// Tolerance: 1e-6 relative (plus 1e-7 absolute). The micro-batches' losses are summed in another
// order than one batch's mean, so the last bits may differ.
#include "parallel/pipeline/pipeline_plan.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "distributed/ranks.h"
#include "distributed/refused_ranks.h"
#include "parallel/plan_evaluation.h"
#include "parallel/sharded/sharded_state.h"

namespace ddpx::dist {
namespace {

using parallel::PipelineSchedule;
using parallel::PipelineShape;
using test::error_text;
using test::run_ranks;

constexpr int kSteps = 6;
constexpr int64_t kPipelineBatch = 12;  // global: 1, 2, 3 or 4 replicas
constexpr double kMaxNorm = 0.5;        // clips the first steps' gradients

torch::nn::Sequential make_net() {
  torch::manual_seed(5);
  return torch::nn::Sequential(
      torch::nn::Linear(6, 24), torch::nn::Tanh(), torch::nn::Linear(24, 24), torch::nn::Tanh(),
      torch::nn::Linear(24, 12), torch::nn::Tanh(), torch::nn::Linear(12, 4));
}

std::unique_ptr<torch::optim::Optimizer> make_pipeline_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
}

struct PipelineBatches {
  std::vector<torch::Tensor> x, y;
};

PipelineBatches pipeline_batches() {
  PipelineBatches b;
  torch::manual_seed(17);
  for (int s = 0; s < kSteps; ++s) {
    b.x.push_back(torch::randn({kPipelineBatch, 6}));
    b.y.push_back(torch::randn({kPipelineBatch, 4}));
  }
  return b;
}

torch::Tensor mse(const torch::Tensor& out, const torch::Tensor& y) {
  return (out - y).pow(2).mean();
}

struct Reference {
  std::vector<torch::Tensor> params, momenta;
  std::vector<double> losses, norms;
  torch::Tensor eval_logits;  // the trained model's on the first batch
};

Reference single_process(const PipelineBatches& b) {
  auto net = make_net();
  auto optimizer = make_pipeline_sgd(net->parameters());
  Reference r;
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor loss = mse(net->forward(b.x[s]), b.y[s]);
    r.losses.push_back(loss.item<double>());
    loss.backward();
    r.norms.push_back(torch::nn::utils::clip_grad_norm_(net->parameters(), kMaxNorm));
    optimizer->step();
    optimizer->zero_grad();
  }
  for (auto& p : net->parameters()) {
    r.params.push_back(p.detach().clone());
    auto& state =
        static_cast<torch::optim::SGDParamState&>(*optimizer->state().at(p.unsafeGetTensorImpl()));
    r.momenta.push_back(state.momentum_buffer().clone());
  }
  torch::NoGradGuard no_grad;
  r.eval_logits = net->forward(b.x[0]);
  return r;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-6 * scale + 1e-7) << what << ": max |diff| " << diff << " at scale " << scale;
}

parallel::MicroBatch micro_batch(const PipelineBatches& b, int s, int replica, int replicas) {
  const int64_t n = kPipelineBatch / replicas;
  parallel::MicroBatch mb;
  mb.input = b.x[s].narrow(0, replica * n, n);
  mb.target = b.y[s].narrow(0, replica * n, n);
  mb.loss = mse;
  return mb;
}

struct PipelineLayout {
  int world;
  int stages;
  PipelineSchedule schedule;
  int microbatches;
  int stages_per_rank;
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  bool accumulate = false;  // each replica's batch as two halves, the first not synchronized
};

// Bytes of the parameters' storages, each storage once (a resident unit's parameters share one).
size_t held_bytes(const torch::nn::Sequential& net) {
  std::set<const c10::StorageImpl*> seen;
  size_t held = 0;
  for (const auto& p : net->parameters())
    if (seen.insert(p.storage().unsafeGetStorageImpl()).second) held += p.storage().nbytes();
  return held;
}

std::string bytes_of(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

torch::serialize::InputArchive archive_of(const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

// The model and optimizer archives load into the unsplit model and its SGD with the single
// process's trained parameters and momenta.
void expect_trained_state(torch::serialize::InputArchive model,
                          torch::serialize::InputArchive optimizer_state, const Reference& want,
                          const std::string& what) {
  auto net = make_net();
  auto optimizer = make_pipeline_sgd(net->parameters());
  net->load(model);
  optimizer->load(optimizer_state);
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    expect_close(params[i], want.params[i], fmt::format("{} parameter {}", what, i));
    auto& state = static_cast<torch::optim::SGDParamState&>(
        *optimizer->state().at(params[i].unsafeGetTensorImpl()));
    expect_close(state.momentum_buffer(), want.momenta[i], fmt::format("{} momentum {}", what, i));
  }
}

// A checkpoint by stage in memory: each rank's part and rank 0's index (written without
// communicating), put back together as the trainer's load does (sharded_state.h).
struct ByStage {
  explicit ByStage(int world) : parts(static_cast<size_t>(world)) {}
  void write(parallel::PipelinePlan& plan, int rank) {
    torch::serialize::OutputArchive part;
    plan.write_part(part);
    parts[static_cast<size_t>(rank)] = bytes_of(part);
    if (rank != 0) return;
    torch::serialize::OutputArchive archive;
    plan.write_index(archive);
    index = bytes_of(archive);
  }
  // The whole model's and optimizer's archives.
  std::pair<std::string, std::string> assemble() const {
    parallel::ShardedParts by_stage;
    by_stage.name = "the pipeline's parts";
    by_stage.index = archive_of(index);
    for (const auto& bytes : parts) by_stage.parts.push_back(archive_of(bytes));
    torch::serialize::OutputArchive m, o;
    parallel::assemble_whole(by_stage, make_pipeline_sgd, m, o);
    return {bytes_of(m), bytes_of(o)};
  }
  std::vector<std::string> parts;
  std::string index;
};

class PipelinePlanTest : public ::testing::TestWithParam<PipelineLayout> {};

TEST_P(PipelinePlanTest, EndsWithTheSingleProcessParametersAndReportsItsLosses) {
  const PipelineLayout layout = GetParam();
  const PipelineBatches b = pipeline_batches();
  const Reference want = single_process(b);
  std::vector<torch::nn::Sequential> nets;
  for (int r = 0; r < layout.world; ++r) nets.push_back(make_net());
  std::vector<std::string> saved(2);
  ByStage by_stage(layout.world);
  auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
    parallel::PipelineOptions options;
    options.stages = layout.stages;
    options.microbatches = layout.microbatches;
    options.schedule = layout.schedule;
    options.stages_per_rank = layout.stages_per_rank;
    options.shard = layout.shard;
    parallel::PipelinePlan plan(nets[rank], context, make_pipeline_sgd, options);
    const int replicas = layout.world / layout.stages;
    EXPECT_EQ(plan.units().empty(), layout.shard == parallel::ShardMode::kNone);
    for (int s = 0; s < kSteps; ++s) {
      parallel::MicroBatch whole = micro_batch(b, s, plan.replica(), replicas);
      whole.learning_rate = 0.1;
      parallel::MicroBatchResult out;
      if (layout.accumulate) {  // two halves, each's mean loss halved: the whole batch's mean
        const int64_t half = whole.input.size(0) / 2;
        for (int h = 0; h < 2; ++h) {
          parallel::MicroBatch part = whole;
          part.input = whole.input.narrow(0, h * half, half);
          part.target = whole.target.narrow(0, h * half, half);
          part.loss = [](const torch::Tensor& o, const torch::Tensor& y) { return mse(o, y) / 2; };
          out = plan.forward_backward(part, /*sync=*/h == 1);
        }
      } else {
        out = plan.forward_backward(whole, true);
      }
      const double norm = plan.clip_grad_norm(kMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], 1e-6 * want.norms[s]) << "rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
      if (layout.shard == parallel::ShardMode::kFull) {
        EXPECT_EQ(held_bytes(nets[rank]), 0u)
            << "rank " << rank << " step " << s << ": parameters held between steps";
      }
      if (plan.pipeline_rank() == 0) {
        ASSERT_TRUE(out.loss.defined()) << "rank " << rank << " step " << s;
        ASSERT_EQ(out.output.size(0), kPipelineBatch / replicas / (layout.accumulate ? 2 : 1));
        if (replicas == 1) {
          EXPECT_NEAR(out.loss.item<double>(), want.losses[s], 1e-6 * want.losses[s])
              << "step " << s;
        }
      } else {
        EXPECT_FALSE(out.loss.defined()) << "rank " << rank;
      }
    }
    // Evaluation runs through the stages: the trained model's logits on each replica's first
    // rank, nothing elsewhere.
    test::expect_replica_evaluation(
        plan, rank, layout.world, plan.replica(), replicas, plan.pipeline_rank() == 0, b.x[0],
        [&](const torch::Tensor& logits) {
          expect_close(logits, want.eval_logits, fmt::format("rank {} evaluation logits", rank));
        });
    // While it trains and evaluates, a rank holds memory for its stages' parameters only; the
    // optimizer of sharded replicas steps a shard of each (one padded row at most).
    size_t mine = 0, shards = 0, padding = 0;
    for (const auto& p : plan.parameters()) shards += p.nbytes();
    size_t held = 0;  // a resident unit (ZeRO-1/2 on shared memory) holds its padded rows
    for (const auto& unit : plan.units()) {
      mine += static_cast<size_t>(unit.param_bytes());
      held += static_cast<size_t>(unit.held_bytes());
      for (const auto& p : unit.params()) padding += p.nbytes() / std::max<int64_t>(p.size(0), 1);
    }
    if (plan.units().empty()) mine = held = shards;
    EXPECT_EQ(held_bytes(nets[rank]), held) << "rank " << rank << " holds other stages' parameters";
    EXPECT_LT(mine, size_t{4} * 3 * 24 * 24) << "rank " << rank;
    if (!plan.units().empty()) {
      EXPECT_LE(shards, mine / replicas + padding) << "rank " << rank;
      EXPECT_GE(shards, mine / replicas) << "rank " << rank;
    }
    // Its part of a checkpoint by stage: what it holds, gathering nothing (not collective).
    ASSERT_TRUE(plan.saves_sharded());
    by_stage.write(plan, rank);
    EXPECT_EQ(held_bytes(nets[rank]), held) << "rank " << rank << " gathered to write its part";
    auto params = plan.module().ptr()->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      expect_close(params[i], want.params[i], fmt::format("rank {} parameter {}", rank, i));
    torch::serialize::OutputArchive m, o;
    plan.state_dict(m, o);
    if (rank == 0) saved = {bytes_of(m), bytes_of(o)};
  });
  EXPECT_ALL_RANKS_OK(errors);
  ASSERT_FALSE(saved[0].empty());

  // The whole checkpoint is the unsplit model's and optimizer's, and so are the parts put
  // together as a checkpoint by stage is loaded.
  expect_trained_state(archive_of(saved[0]), archive_of(saved[1]), want, "saved");
  const auto [model, optimizer] = by_stage.assemble();
  expect_trained_state(archive_of(model), archive_of(optimizer), want, "by stage");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelinePlanTest,
    ::testing::Values(
        PipelineLayout{2, 2, PipelineSchedule::kGpipe, 4, 1},
        PipelineLayout{2, 2, PipelineSchedule::k1F1B, 4, 1},
        PipelineLayout{2, 2, PipelineSchedule::kInterleaved, 4, 2},
        PipelineLayout{4, 2, PipelineSchedule::k1F1B, 2, 1},
        PipelineLayout{4, 2, PipelineSchedule::kInterleaved, 2, 2},
        PipelineLayout{4, 2, PipelineSchedule::k1F1B, 3, 1, parallel::ShardMode::kNone, true},
        PipelineLayout{4, 4, PipelineSchedule::k1F1B, 8, 1},
        PipelineLayout{3, 3, PipelineSchedule::kGpipe, 3, 1},
        PipelineLayout{4, 2, PipelineSchedule::k1F1B, 2, 1, parallel::ShardMode::kOptimizer},
        PipelineLayout{4, 2, PipelineSchedule::k1F1B, 3, 1, parallel::ShardMode::kFull, true},
        PipelineLayout{8, 2, PipelineSchedule::kGpipe, 3, 1, parallel::ShardMode::kGradients},
        PipelineLayout{6, 2, PipelineSchedule::kInterleaved, 2, 2, parallel::ShardMode::kFull}),
    [](const auto& info) {
      const PipelineLayout& l = info.param;
      return fmt::format(
          "world{}_stages{}_{}_m{}_v{}{}{}", l.world, l.stages,
          l.schedule == PipelineSchedule::k1F1B ? "onef1b" : name(l.schedule), l.microbatches,
          l.stages_per_rank,
          l.shard == parallel::ShardMode::kNone ? "" : std::string("_shard_") + name(l.shard),
          l.accumulate ? "_accumulated" : "");
    });

// A whole checkpoint loads into a pipeline, into one whose stages' replicas shard them too.
TEST(PipelinePlanCheckpointTest, AWholeCheckpointLoadsIntoAPipelineThatGoesOnAsTheSingleProcess) {
  const PipelineBatches b = pipeline_batches();
  // The single process's state after 3 steps, saved as the data-parallel plan saves it.
  auto net = make_net();
  auto optimizer = make_pipeline_sgd(net->parameters());
  for (int s = 0; s < 3; ++s) {
    mse(net->forward(b.x[s]), b.y[s]).backward();
    optimizer->step();
    optimizer->zero_grad();
  }
  torch::serialize::OutputArchive m, o;
  net->save(m);
  optimizer->save(o);
  std::ostringstream mb, ob;
  m.save_to(mb);
  o.save_to(ob);
  const std::string model_bytes = mb.str(), optimizer_bytes = ob.str();
  for (int s = 3; s < kSteps; ++s) {  // and the single process goes on, unclipped
    mse(net->forward(b.x[s]), b.y[s]).backward();
    optimizer->step();
    optimizer->zero_grad();
  }
  const auto want = net->parameters();
  for (const auto& [world, shard] :
       {std::pair{2, parallel::ShardMode::kNone}, std::pair{4, parallel::ShardMode::kFull},
        std::pair{4, parallel::ShardMode::kOptimizer}}) {
    SCOPED_TRACE(fmt::format("{} ranks, --shard {}", world, name(shard)));
    std::vector<torch::nn::Sequential> nets;
    for (int r = 0; r < world; ++r) nets.push_back(make_net());
    auto errors = run_ranks(world, [&](int rank, Context& context) {
      parallel::PipelineOptions options;
      options.microbatches = 2;
      options.shard = shard;
      parallel::PipelinePlan plan(nets[rank], context, make_pipeline_sgd, options);
      torch::serialize::InputArchive mi, oi;
      std::istringstream ms(model_bytes), os(optimizer_bytes);
      mi.load_from(ms);
      oi.load_from(os);
      plan.load_state_dict(mi, oi);
      for (int s = 3; s < kSteps; ++s) {
        parallel::MicroBatch mb = micro_batch(b, s, plan.replica(), world / 2);
        mb.learning_rate = 0.1;
        plan.forward_backward(mb, true);
        plan.step();
        plan.zero_grad();
      }
      auto params = plan.module().ptr()->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        expect_close(params[i], want[i], fmt::format("rank {} parameter {}", rank, i));
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// A BatchNorm model's checkpoint by stage holds what its whole checkpoint holds: every parameter,
// running statistic and momentum, bitwise, from each stage's own rank (replica 0's statistics),
// unsharded, sharded and interleaved.
TEST(PipelinePlanCheckpointTest, PartsByStageHoldWhatTheWholeCheckpointHolds) {
  auto make_bn_net = [] {
    torch::manual_seed(7);
    return torch::nn::Sequential(torch::nn::Linear(6, 24), torch::nn::BatchNorm1d(24),
                                 torch::nn::Tanh(), torch::nn::Linear(24, 12),
                                 torch::nn::BatchNorm1d(12), torch::nn::Tanh(),
                                 torch::nn::Linear(12, 4));
  };
  const PipelineBatches b = pipeline_batches();
  struct Case {
    int world;
    PipelineSchedule schedule;
    int stages_per_rank;
    parallel::ShardMode shard;
  };
  for (const Case& c : {Case{2, PipelineSchedule::k1F1B, 1, parallel::ShardMode::kNone},
                        Case{4, PipelineSchedule::k1F1B, 1, parallel::ShardMode::kNone},
                        Case{4, PipelineSchedule::kInterleaved, 2, parallel::ShardMode::kFull},
                        Case{6, PipelineSchedule::k1F1B, 1, parallel::ShardMode::kOptimizer}}) {
    SCOPED_TRACE(fmt::format("{} ranks, {}, --shard {}", c.world, name(c.schedule), name(c.shard)));
    std::vector<torch::nn::Sequential> nets;
    for (int r = 0; r < c.world; ++r) nets.push_back(make_bn_net());
    std::vector<std::string> whole(2);
    ByStage by_stage(c.world);
    auto errors = run_ranks(c.world, [&](int rank, Context& context) {
      parallel::PipelineOptions options;
      options.microbatches = 2;
      options.schedule = c.schedule;
      options.stages_per_rank = c.stages_per_rank;
      options.shard = c.shard;
      parallel::PipelinePlan plan(nets[rank], context, make_pipeline_sgd, options);
      for (int s = 0; s < 2; ++s) {
        parallel::MicroBatch mb = micro_batch(b, s, plan.replica(), c.world / 2);
        mb.learning_rate = 0.1;
        plan.forward_backward(mb, true);
        plan.step();
        plan.zero_grad();
      }
      by_stage.write(plan, rank);
      torch::serialize::OutputArchive m, o;
      plan.state_dict(m, o);
      if (rank == 0) whole = {bytes_of(m), bytes_of(o)};
    });
    EXPECT_ALL_RANKS_OK(errors);
    ASSERT_FALSE(by_stage.index.empty());
    const auto [model, optimizer] = by_stage.assemble();
    // Both into the unsplit model and its optimizer, side by side.
    std::vector<torch::nn::Sequential> loaded{make_bn_net(), make_bn_net()};
    std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
    for (auto& net : loaded) optimizers.push_back(make_pipeline_sgd(net->parameters()));
    auto mi = archive_of(whole[0]), oi = archive_of(whole[1]);
    loaded[0]->load(mi);
    optimizers[0]->load(oi);
    auto mp = archive_of(model), op = archive_of(optimizer);
    loaded[1]->load(mp);
    optimizers[1]->load(op);
    const auto named = loaded[0]->named_parameters();
    const auto theirs = loaded[1]->named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      EXPECT_TRUE(torch::equal(named[i].value(), theirs[i].value())) << named[i].key();
      auto momentum = [&](int which, const torch::Tensor& p) {
        return static_cast<torch::optim::SGDParamState&>(
                   *optimizers[which]->state().at(p.unsafeGetTensorImpl()))
            .momentum_buffer();
      };
      EXPECT_TRUE(torch::equal(momentum(0, named[i].value()), momentum(1, theirs[i].value())))
          << named[i].key() << "'s momentum";
    }
    const auto buffers = loaded[0]->named_buffers();
    const auto their_buffers = loaded[1]->named_buffers();
    ASSERT_EQ(buffers.size(), 6u);  // two BatchNorms' mean, variance and count
    for (size_t j = 0; j < buffers.size(); ++j) {
      EXPECT_TRUE(torch::equal(buffers[j].value(), their_buffers[j].value())) << buffers[j].key();
    }
    // Trained statistics, not the initial ones.
    EXPECT_GT(loaded[1]->named_buffers()["1.running_mean"].abs().sum().item<double>(), 0);
  }
}

// Ranks built with other weights start from rank 0's, sent a stage at a time.
TEST(PipelinePlanStartTest, EveryRankStartsFromRankZerosWeights) {
  std::vector<torch::nn::Sequential> nets{make_net(), make_net()};
  {
    torch::NoGradGuard no_grad;
    for (auto& p : nets[1]->parameters()) p.add_(1.0);
  }
  std::vector<torch::Tensor> want;
  for (const auto& p : make_net()->parameters()) want.push_back(p.detach().clone());
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::PipelineOptions options;
    options.microbatches = 2;
    parallel::PipelinePlan plan(nets[rank], context, make_pipeline_sgd, options);
    auto params = plan.module().ptr()->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i], want[i])) << "rank " << rank << " parameter " << i;
  });
  EXPECT_ALL_RANKS_OK(errors);
}

TEST(PipelinePlanRefusalTest, LayoutsThatCannotRunAreRefusedOnEveryRankBeforeAnyCollective) {
  std::vector<torch::nn::Sequential> nets{make_net(), make_net(), make_net()};
  auto refused = [&](int world, parallel::PipelineOptions options, const std::string& expected) {
    SCOPED_TRACE(expected);
    test::expect_refused_before_any_collective(
        world,
        [&](int rank, Context& context) {
          parallel::PipelinePlan plan(nets[rank], context, make_pipeline_sgd, options);
        },
        {expected});
  };
  parallel::PipelineOptions three;
  three.stages = 2;
  refused(3, three, "--pipeline_parallel 2 does not divide the world of 3 ranks");
  parallel::PipelineOptions interleaved;
  interleaved.schedule = PipelineSchedule::kInterleaved;
  interleaved.stages_per_rank = 2;
  interleaved.microbatches = 3;
  refused(2, interleaved, "3 micro-batches is not a multiple of 2");
  parallel::PipelineOptions few;
  few.microbatches = 1;
  refused(2, few, "1f1b needs at least one micro-batch a stage");
  parallel::PipelineOptions deep;
  deep.schedule = PipelineSchedule::kInterleaved;
  deep.stages_per_rank = 4;
  deep.microbatches = 2;
  refused(2, deep, "7 layers a pipeline can cut between, fewer than the 8 stages");
}

struct ScheduleCase {
  PipelineSchedule schedule;
  int chunks;
};

class PipelineScheduleTest : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(PipelineScheduleTest, RunsWithoutDeadlockAndItsBubbleIsTheFormulas) {
  const ScheduleCase c = GetParam();
  for (int p : {2, 3, 4}) {
    for (int m : {4, 8, 12}) {
      PipelineShape shape{p, m, c.chunks};
      if (!parallel::schedule_problem(c.schedule, shape).empty()) continue;
      // Each rank runs every micro-batch's forward and backward once per chunk, forward first.
      for (int r = 0; r < p; ++r) {
        auto actions = parallel::schedule_actions(c.schedule, shape, r);
        ASSERT_EQ(actions.size(), static_cast<size_t>(2 * m * c.chunks));
        std::set<std::pair<int, int>> forwarded;
        for (const auto& a : actions) {
          if (a.forward) {
            EXPECT_TRUE(forwarded.insert({a.microbatch, a.chunk}).second);
          } else {
            EXPECT_TRUE(forwarded.count({a.microbatch, a.chunk}))
                << "backward before forward: rank " << r << " micro-batch " << a.microbatch;
          }
        }
      }
      auto run = parallel::simulate_schedule(c.schedule, shape);
      ASSERT_FALSE(run.deadlocked) << name(c.schedule) << " P=" << p << " M=" << m;
      const double ideal = parallel::ideal_bubble(c.schedule, shape);
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(run.idle_share[r], ideal, 0.03)
            << name(c.schedule) << " P=" << p << " M=" << m << " rank " << r;
        if (c.schedule == PipelineSchedule::kGpipe) EXPECT_EQ(run.max_activations[r], m);
        if (c.schedule == PipelineSchedule::k1F1B) EXPECT_EQ(run.max_activations[r], p - r);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineScheduleTest,
                         ::testing::Values(ScheduleCase{PipelineSchedule::kGpipe, 1},
                                           ScheduleCase{PipelineSchedule::k1F1B, 1},
                                           ScheduleCase{PipelineSchedule::kInterleaved, 2},
                                           ScheduleCase{PipelineSchedule::kInterleaved, 3}),
                         [](const auto& info) {
                           return fmt::format("{}_v{}",
                                              info.param.schedule == PipelineSchedule::k1F1B
                                                  ? "onef1b"
                                                  : name(info.param.schedule),
                                              info.param.chunks);
                         });

// NCCL matches a pair's transfers by order, not by tag: on each link (sender, receiver, kind:
// pipeline_links.h) the sender's sends must name the same (micro-batch, stage) in the same order
// as the receiver's receives, for every layout a user can ask for, or an NCCL pipeline would
// hang or take one micro-batch's tensor for another's. The CPU's runs take the same order over
// Gloo (PipelinePlanTest); this covers the layouts they do not run.
TEST(PipelineScheduleTest, EachLinksSendsComeInTheOrderOfItsReceives) {
  using Link = std::tuple<int, int, bool>;  // sender, receiver, activations
  int layouts = 0;
  for (PipelineSchedule schedule :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved}) {
    for (int p = 2; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          PipelineShape shape{p, m, v};
          if (!parallel::schedule_problem(schedule, shape).empty()) continue;
          ++layouts;
          std::map<Link, std::vector<std::pair<int, int>>> sent, received;
          size_t transfers = 0;
          for (int r = 0; r < p; ++r) {
            for (const auto& t : parallel::schedule_transfers(schedule, shape, r)) {
              ++transfers;
              const Link link = t.send ? Link{r, t.peer, t.forward} : Link{t.peer, r, t.forward};
              (t.send ? sent : received)[link].push_back({t.microbatch, t.stage});
            }
          }
          // Each of the V*P-1 boundaries carries M activations and M gradients, each sent and
          // received once.
          EXPECT_EQ(transfers, static_cast<size_t>(4 * m * (v * p - 1)));
          EXPECT_EQ(sent.size(), received.size());
          for (const auto& [link, order] : sent) {
            EXPECT_EQ(order, received[link])
                << name(schedule) << " P=" << p << " M=" << m << " V=" << v << ": "
                << (std::get<2>(link) ? "activations" : "gradients") << " from rank "
                << std::get<0>(link) << " to " << std::get<1>(link);
          }
        }
      }
    }
  }
  EXPECT_GT(layouts, 150);
}

TEST(PipelineScheduleTest, TheIssuesFiguresForFourStagesAndEightMicroBatches) {
  PipelineShape shape{4, 8, 1};
  EXPECT_NEAR(parallel::ideal_bubble(PipelineSchedule::kGpipe, shape), 0.273, 0.001);
  shape.chunks = 2;
  EXPECT_NEAR(parallel::ideal_bubble(PipelineSchedule::kInterleaved, shape), 0.158, 0.001);
}

TEST(StageBalanceTest, CutsContiguousStagesWithTheSmallestLargestStage) {
  EXPECT_EQ(parallel::balance_stages({1, 1, 1, 1}, 2, "m"), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(parallel::balance_stages({8, 1, 1, 1, 1, 4}, 3, "m"),
            (std::vector<size_t>{0, 1, 5, 6}));
  EXPECT_EQ(parallel::balance_stages({0, 5, 0, 5}, 2, "m").size(), 3u);
  const std::string error = test::usage_error([] {
    parallel::balance_stages({1, 1}, 3, "resnet18");
  });
  EXPECT_NE(error.find("resnet18 has 2 layers"), std::string::npos) << error;
}

}  // namespace
}  // namespace ddpx::dist
