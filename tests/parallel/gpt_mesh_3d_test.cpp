// A GPT on the 3-D mesh (data x pipeline x tensor, tensor_parallel_plan.h with
// TensorParallelOptions::pipeline): each pipeline stage's blocks split over the tensor ranks, the
// first stage holding this tensor rank's rows of the vocabulary-parallel token embedding, the last
// stage the same rows as the tied output layer and the vocabulary-parallel loss
// (parallel_gpt.h). Against one process training the unsplit GPT on the same global batches (6
// SGD steps with momentum and weight decay, each clipped by the whole model's gradient norm):
// PP2 x TP2 under 1F1B, GPipe with sequence parallelism (the stages pass their share of the
// tokens), interleaved (4 stages on 2 ranks) with blocks recomputed, and DP2 x PP2 x TP2 whole and
// with each stage's pieces sharded over their replicas (--shard full). Checked: each step's loss
// and gradient norm (the tied rows counted once), the final parameters (through module() and
// through state_dict(), which loads into one process), evaluation's gathered logits on tensor rank
// 0 of the replica's first stage, and the two copies of each tensor rank's embedding rows, on the
// first and the last stage, bitwise equal after every step (summed over the embedding group of
// that tensor rank). Each rank is a real member of a Gloo group on 127.0.0.1.
//
// Tolerance: 2e-5 relative (plus 1e-6 absolute), as the GPT pipeline's own test
// (tied_embedding_pipeline_test.cpp): the micro-batches' means, the split matrix products and the
// loss's sums over the vocabulary's slices in another order, grown over 6 steps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <mutex>
#include <sstream>

#include "distributed/ranks.h"
#include "models/gpt.h"
#include "parallel/plan_evaluation.h"
#include "parallel/tensor/tensor_parallel_plan.h"

namespace ddpx::dist {
namespace {

using parallel::PipelineSchedule;
using parallel::ShardMode;
using test::error_text;
using test::run_ranks;

constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;  // global windows a step
constexpr int64_t kTokens = 8;
constexpr int64_t kVocab = 40;  // padded to 256 over 2 tensor ranks (--vocab_divisible_by 128)
constexpr double kMaxNorm = 1.0;
constexpr double kTolerance = 2e-5;

models::Gpt make_gpt() {
  torch::manual_seed(5);
  models::GptOptions o;
  o.vocab_size = kVocab;
  o.block_size = 16;
  o.n_layer = 4;
  o.n_head = 2;
  o.n_embd = 16;
  return models::Gpt(o);
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.5).momentum(0.9).weight_decay(1e-2));
}

torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

struct Batches {
  std::vector<torch::Tensor> x, y;
};

Batches batches() {
  Batches b;
  torch::manual_seed(17);
  for (int s = 0; s < kSteps; ++s) {
    b.x.push_back(torch::randint(kVocab, {kBatch, kTokens}, torch::kLong));
    b.y.push_back(torch::randint(kVocab, {kBatch, kTokens}, torch::kLong));
  }
  return b;
}

struct Reference {
  std::map<std::string, torch::Tensor> params;
  std::vector<double> losses, norms;
  torch::Tensor eval_logits;  // the trained model's on b.x[0]
};

Reference single_process(const Batches& b) {
  auto gpt = make_gpt();
  auto optimizer = make_sgd(gpt->parameters());
  Reference r;
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor loss = token_loss(gpt->forward(b.x[s]), b.y[s]);
    r.losses.push_back(loss.item<double>());
    loss.backward();
    r.norms.push_back(torch::nn::utils::clip_grad_norm_(gpt->parameters(), kMaxNorm));
    optimizer->step();
    optimizer->zero_grad();
  }
  for (const auto& p : gpt->named_parameters()) r.params[p.key()] = p.value().detach().clone();
  gpt->eval();
  torch::NoGradGuard no_grad;
  r.eval_logits = gpt->forward(b.x[0]);
  return r;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, kTolerance * scale + 1e-6)
      << what << ": max |diff| " << diff << " at scale " << scale;
}

void expect_reference_parameters(const torch::nn::Module& gpt, const Reference& want,
                                 const std::string& what) {
  const auto params = gpt.named_parameters();
  ASSERT_EQ(params.size(), want.params.size()) << what;
  for (const auto& p : params)
    expect_close(p.value(), want.params.at(p.key()), what + " " + p.key());
}

struct Layout {
  int world;  // ranks: replicas x 2 stages x 2 tensor ranks
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages_per_rank = 1;
  bool sequence_parallel = false;
  std::string checkpointing = "none";
  ShardMode shard = ShardMode::kNone;
};

constexpr int kStages = 2, kTensor = 2;

class GptMesh3dTest : public ::testing::TestWithParam<Layout> {};

TEST_P(GptMesh3dTest, TrainsAsOneProcessWithEachTensorRanksTiedRowsEqualAfterEveryStep) {
  const Layout layout = GetParam();
  const Batches b = batches();
  const Reference want = single_process(b);
  const int replicas = layout.world / (kStages * kTensor);
  std::vector<models::Gpt> gpts;
  for (int r = 0; r < layout.world; ++r) gpts.push_back(make_gpt());
  std::mutex mutex;
  std::map<std::pair<int, int>, torch::Tensor> rows;  // (rank, step): its embedding rows
  std::string saved;
  auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
    parallel::TensorParallelOptions options;
    options.size = kTensor;
    options.sequence_parallel = layout.sequence_parallel;
    options.checkpointing = models::parse_activation_checkpointing(layout.checkpointing);
    options.shard = layout.shard;
    options.model_name = "gpt";
    parallel::PipelineOptions pipeline;
    pipeline.stages = kStages;
    pipeline.schedule = layout.schedule;
    pipeline.stages_per_rank = layout.stages_per_rank;
    pipeline.microbatches = layout.schedule == PipelineSchedule::kInterleaved ? 4 : 2;
    options.pipeline = pipeline;
    parallel::TensorParallelPlan plan(torch::nn::AnyModule(gpts[rank]), context, make_sgd, options);
    ASSERT_NE(plan.pipeline(), nullptr);
    // Stage s of replica d, tensor rank t, on rank (d * P + s) * T + t.
    const int replica = rank / (kStages * kTensor), stage = rank / kTensor % kStages;
    ASSERT_EQ(plan.pipeline()->pipeline_rank(), stage);
    ASSERT_EQ(plan.tensor_rank(), rank % kTensor);
    const bool whole = layout.shard == ShardMode::kNone;
    for (int s = 0; s < kSteps; ++s) {
      const int64_t n = kBatch / replicas;
      parallel::MicroBatch mb;
      mb.input = b.x[s].narrow(0, replica * n, n);
      mb.target = b.y[s].narrow(0, replica * n, n);
      mb.loss = token_loss;  // replaced by the vocabulary-parallel loss
      mb.learning_rate = 0.5;
      parallel::MicroBatchResult out = plan.forward_backward(mb, true);
      ASSERT_EQ(out.loss.defined(), stage == 0) << "rank " << rank << " step " << s;
      if (stage == 0 && replicas == 1) {
        EXPECT_NEAR(out.loss.item<double>(), want.losses[s], kTolerance * want.losses[s])
            << "rank " << rank << " step " << s;
        // The predictions: the whole vocabulary's argmax, token ids.
        EXPECT_EQ(out.output.sizes(), b.x[s].sizes()) << "rank " << rank;
      }
      const double norm = plan.clip_grad_norm(kMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], kTolerance * want.norms[s])
          << "rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
      if (whole) {
        std::lock_guard<std::mutex> lock(mutex);
        for (const auto& p : plan.split_module().named_parameters()) {
          if (p.key() == "transformer.wte.weight") rows[{rank, s}] = p.value().detach().clone();
        }
      }
    }
    test::expect_replica_evaluation(
        plan, rank, layout.world, replica, replicas, stage == 0 && plan.tensor_rank() == 0, b.x[0],
        [&](const torch::Tensor& logits) {
          expect_close(logits, want.eval_logits, fmt::format("rank {} evaluation logits", rank));
        });
    expect_reference_parameters(*plan.module().ptr(), want, fmt::format("rank {}", rank));
    torch::serialize::OutputArchive model, optimizer;
    plan.state_dict(model, optimizer);
    if (rank == 0) {
      std::ostringstream out;
      model.save_to(out);
      saved = out.str();
    }
  });
  EXPECT_ALL_RANKS_OK(errors);

  // Each tensor rank's embedding rows: its first stage's copy and its last stage's, bitwise equal.
  for (int first = 0; first < layout.world && layout.shard == ShardMode::kNone; ++first) {
    if (first / kTensor % kStages != 0) continue;
    const int last = first + (kStages - 1) * kTensor;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(rows.count({first, s}) && rows.count({last, s}));
      const torch::Tensor& a = rows.at({first, s});
      const torch::Tensor& z = rows.at({last, s});
      EXPECT_TRUE(torch::equal(a, z))
          << "step " << s << ": the embedding rows on ranks " << first << " and " << last
          << " differ by " << (a - z).abs().max().item<double>();
    }
  }
  // The checkpoint is the unsplit GPT's: it loads into one process.
  ASSERT_FALSE(saved.empty());
  auto one = make_gpt();
  std::istringstream in(saved);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  one->load(archive);
  expect_reference_parameters(*one, want, "loaded into one process");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GptMesh3dTest,
    ::testing::Values(Layout{4}, Layout{4, PipelineSchedule::kGpipe, 1, true},
                      Layout{4, PipelineSchedule::kInterleaved, 2, false, "blocks"}, Layout{8},
                      Layout{8, PipelineSchedule::k1F1B, 1, false, "none", ShardMode::kFull}),
    [](const auto& info) {
      const Layout& l = info.param;
      return fmt::format("dp{}_pp2_tp2_{}{}{}{}", l.world / 4,
                         l.schedule == PipelineSchedule::k1F1B ? "onef1b" : name(l.schedule),
                         l.sequence_parallel ? "_sp" : "",
                         l.checkpointing == "none" ? "" : "_checkpointed",
                         l.shard == ShardMode::kNone ? "" : std::string("_shard_") + name(l.shard));
    });

}  // namespace
}  // namespace ddpx::dist
