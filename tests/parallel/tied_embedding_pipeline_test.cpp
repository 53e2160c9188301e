// A GPT cut into pipeline stages (parallel/pipeline/, models/layer_sequence.h): the embeddings on
// the first stage, the blocks between, the final LayerNorm and the head tied to the token
// embedding on the last. Against one process training the unsplit model on the same global
// batches (6 SGD steps with momentum and weight decay, each clipped by the whole model's gradient
// norm): every schedule on 2 ranks (GPipe, 1F1B, interleaved), with activation checkpointing per
// block, and 2 stages x 2 data-parallel replicas (whole and ZeRO-3): each step's loss and norm (the
// tied gradient counted once) and the final parameters agree; the two copies of the tied embedding,
// on the first and the last stage's ranks, are bitwise equal after every step (their gradients are
// summed over the embedding group: without that sum, they drift apart after the first step); the
// pipeline's state_dict() is the unsplit model's, with the one tied tensor, and loads into one
// process. Each rank is a real member of a Gloo group on 127.0.0.1.
//
// Tolerance: 2e-5 relative (plus 1e-6 absolute). Each micro-batch's loss is a mean over its
// tokens, summed in another order than one batch's mean, and the errors grow over 6 steps.
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
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::dist {
namespace {

using parallel::PipelineSchedule;
using test::run_ranks;

constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;  // global windows a step: 1 or 2 replicas
constexpr int64_t kTokens = 8;
constexpr int64_t kVocab = 40;
constexpr double kMaxNorm = 1.0;

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
  return r;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 2e-5 * scale + 1e-6) << what << ": max |diff| " << diff << " at scale " << scale;
}

void expect_reference_parameters(const models::Gpt& gpt, const Reference& want,
                                 const std::string& what) {
  const auto params = gpt->named_parameters();
  ASSERT_EQ(params.size(), want.params.size()) << what;
  for (const auto& p : params)
    expect_close(p.value(), want.params.at(p.key()), what + " " + p.key());
}

struct GptLayout {
  int world;
  int stages;
  PipelineSchedule schedule;
  int microbatches;
  int stages_per_rank;
  std::string checkpointing = "none";
  parallel::ShardMode shard = parallel::ShardMode::kNone;
};

class PipelineGptTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(PipelineGptTest, TrainsLikeOneProcessWithTiedCopiesEqualAfterEveryStep) {
  const GptLayout layout = GetParam();
  const Batches b = batches();
  const Reference want = single_process(b);
  const int replicas = layout.world / layout.stages;
  std::vector<models::Gpt> gpts;
  for (int r = 0; r < layout.world; ++r) gpts.push_back(make_gpt());
  // The token embedding after each step, on each rank that holds it.
  std::mutex mutex;
  std::map<std::pair<int, int>, torch::Tensor> copies;  // (rank, step)
  std::vector<int> pipeline_rank(static_cast<size_t>(layout.world));
  std::string saved;
  auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
    parallel::PipelineOptions options;
    options.stages = layout.stages;
    options.microbatches = layout.microbatches;
    options.schedule = layout.schedule;
    options.stages_per_rank = layout.stages_per_rank;
    options.checkpointing = models::parse_activation_checkpointing(layout.checkpointing);
    options.shard = layout.shard;
    options.sample_shape = {kTokens};
    options.sample_dtype = torch::kLong;
    parallel::PipelinePlan plan(torch::nn::AnyModule(gpts[rank]), context, make_sgd, options);
    pipeline_rank[rank] = plan.pipeline_rank();
    const bool holds_embedding =
        plan.pipeline_rank() == 0 || plan.pipeline_rank() == layout.stages - 1;
    for (int s = 0; s < kSteps; ++s) {
      const int64_t n = kBatch / replicas;
      parallel::MicroBatch mb;
      mb.input = b.x[s].narrow(0, plan.replica() * n, n);
      mb.target = b.y[s].narrow(0, plan.replica() * n, n);
      mb.loss = token_loss;
      mb.learning_rate = 0.5;
      parallel::MicroBatchResult out = plan.forward_backward(mb, true);
      const double norm = plan.clip_grad_norm(kMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], 1e-5 * want.norms[s]) << "rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
      if (plan.pipeline_rank() == 0 && replicas == 1) {
        ASSERT_TRUE(out.loss.defined()) << "rank " << rank;
        EXPECT_NEAR(out.loss.item<double>(), want.losses[s], 1e-5 * want.losses[s]) << "step " << s;
      }
      if (holds_embedding && plan.units().empty()) {
        std::lock_guard<std::mutex> lock(mutex);
        copies[{rank, s}] = gpts[rank]->transformer->wte->weight.detach().clone();
      }
    }
    expect_reference_parameters(std::dynamic_pointer_cast<models::GptImpl>(plan.module().ptr()),
                                want, fmt::format("rank {}", rank));
    torch::serialize::OutputArchive model, optimizer;
    plan.state_dict(model, optimizer);
    if (rank == 0) {
      std::ostringstream out;
      model.save_to(out);
      saved = out.str();
    }
  });
  EXPECT_ALL_RANKS_OK(errors);

  // The first and the last stage's copies of the tied embedding, in each replica, step alike.
  for (int first = 0; first < layout.world && layout.shard == parallel::ShardMode::kNone; ++first) {
    if (pipeline_rank[first] != 0) continue;
    const int last = first + layout.stages - 1;  // the replica's last pipeline rank (mesh.h)
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(copies.count({first, s}) && copies.count({last, s}));
      EXPECT_TRUE(torch::equal(copies.at({first, s}), copies.at({last, s})))
          << "step " << s << ": the tied embedding's copies on ranks " << first << " and " << last
          << " differ by "
          << (copies.at({first, s}) - copies.at({last, s})).abs().max().item<double>();
    }
  }
  // The pipeline's checkpoint is the unsplit model's: it loads into one process.
  ASSERT_FALSE(saved.empty());
  auto one = make_gpt();
  std::istringstream in(saved);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  one->load(archive);
  expect_reference_parameters(one, want, "loaded into one process");
}

INSTANTIATE_TEST_SUITE_P(Layouts, PipelineGptTest,
                         ::testing::Values(GptLayout{2, 2, PipelineSchedule::kGpipe, 4, 1},
                                           GptLayout{2, 2, PipelineSchedule::k1F1B, 4, 1},
                                           GptLayout{2, 2, PipelineSchedule::kInterleaved, 4, 2},
                                           GptLayout{2, 2, PipelineSchedule::k1F1B, 2, 1, "blocks"},
                                           GptLayout{4, 2, PipelineSchedule::k1F1B, 2, 1},
                                           GptLayout{4, 2, PipelineSchedule::k1F1B, 2, 1, "none",
                                                     parallel::ShardMode::kFull}),
                         [](const auto& info) {
                           const GptLayout& l = info.param;
                           return fmt::format(
                               "world{}_stages{}_{}_v{}{}{}", l.world, l.stages,
                               l.schedule == PipelineSchedule::k1F1B ? "onef1b" : name(l.schedule),
                               l.stages_per_rank, l.checkpointing == "none" ? "" : "_checkpointed",
                               l.shard == parallel::ShardMode::kNone
                                   ? ""
                                   : std::string("_shard_") + name(l.shard));
                         });

}  // namespace
}  // namespace ddpx::dist
