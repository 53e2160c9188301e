// One runner for a language model (the GPT family, BERT) under a pipeline, tensor parallelism or
// both (parallel/pipeline/pipeline_plan.h; parallel/tensor/tensor_parallel_plan.h with
// TensorParallelOptions::pipeline), against one process training the unsplit model on the same
// global batches: 6 SGD steps with momentum and weight decay, each clipped by the whole model's
// gradient norm. Checked: each step's loss and gradient norm (the tied rows counted once), the
// final parameters (through module() and through state_dict(), which loads into one process),
// evaluation's gathered logits under tensor parallelism, and the copies of the tied embedding
// (each tensor rank's rows of it) on the first and the last stage bitwise equal after every step:
// their gradients are summed over the embedding group, and without that sum they drift apart
// after the first step. Each rank is a real member of a Gloo group on 127.0.0.1.
//
// A masked LM's labels mark the same number of tokens in every window (the others -100), so each
// micro-batch's and each replica's mean over its masked tokens averages to the global batch's.
//
// Tolerance: 2e-5 relative (plus 1e-6 absolute): the micro-batches' means, the split matrix
// products and the loss's sums over the vocabulary's slices in another order, grown over 6 steps.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/ranks.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/plan_evaluation.h"
#include "parallel/tensor/tensor_parallel_plan.h"

namespace ddpx::test {

constexpr int kLmSteps = 6;
constexpr int64_t kLmBatch = 8;  // global windows a step
constexpr int64_t kLmTokens = 8;
constexpr int64_t kLmMasked = 3;  // a masked LM's labelled tokens a window
constexpr double kLmMaxNorm = 1.0;
constexpr double kLmTolerance = 2e-5;

struct LanguageModelCase {
  std::string model_name;                      // "gpt", "bert"
  std::function<torch::nn::AnyModule()> make;  // the same weights at every call
  std::string tied;                            // the tied embedding's parameter name
  int64_t vocab = 0;
  bool masked = false;  // a masked LM's labels
};

struct LanguageModelLayout {
  int world;
  int stages = 2;  // 1: no pipeline
  int tensor = 1;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 1;
  int microbatches = 2;
  bool sequence_parallel = false;
  std::string checkpointing = "none";
  parallel::ShardMode shard = parallel::ShardMode::kNone;
};

// gpt-nano's shape, smaller: 4 blocks, 2 heads, 16 wide, a vocabulary of 40 (padded to 256 over
// 2 tensor ranks: --vocab_divisible_by 128).
inline LanguageModelCase gpt_case() {
  LanguageModelCase c{"gpt", nullptr, "transformer.wte.weight", 40, false};
  c.make = [] {
    torch::manual_seed(5);
    models::GptOptions o;
    o.vocab_size = 40;
    o.block_size = 16;
    o.n_layer = 4;
    o.n_head = 2;
    o.n_embd = 16;
    return torch::nn::AnyModule(models::Gpt(o));
  };
  return c;
}

// bert-nano's shape, smaller: 4 layers, 2 heads, 16 wide, intermediate 32, a vocabulary of 40;
// the decoder's bias drawn, so that its split and its step are checked too.
inline LanguageModelCase bert_case() {
  LanguageModelCase c{"bert", nullptr, "bert.embeddings.word_embeddings.weight", 40, true};
  c.make = [] {
    torch::manual_seed(5);
    models::BertOptions o;
    o.vocab_size = 40;
    o.hidden_size = 16;
    o.num_hidden_layers = 4;
    o.num_attention_heads = 2;
    o.intermediate_size = 32;
    o.max_position_embeddings = 16;
    models::Bert bert(o);
    torch::NoGradGuard no_grad;
    bert->cls->predictions->bias.normal_(0, 0.5);
    return torch::nn::AnyModule(bert);
  };
  return c;
}

inline std::string layout_name(const LanguageModelLayout& l) {
  const int replicas = l.world / (l.stages * l.tensor);
  std::string s = fmt::format("dp{}", replicas);
  if (l.stages > 1) {
    s += fmt::format("_pp{}_{}", l.stages,
                     l.schedule == parallel::PipelineSchedule::k1F1B ? "onef1b" : name(l.schedule));
    if (l.stages_per_rank > 1) s += fmt::format("_v{}", l.stages_per_rank);
    s += fmt::format("_m{}", l.microbatches);
  }
  if (l.tensor > 1) s += fmt::format("_tp{}", l.tensor);
  if (l.sequence_parallel) s += "_sp";
  if (l.checkpointing != "none") s += "_checkpointed";
  if (l.shard != parallel::ShardMode::kNone) s += std::string("_shard_") + name(l.shard);
  return s;
}

inline std::unique_ptr<torch::optim::Optimizer> lm_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.5).momentum(0.9).weight_decay(1e-2));
}

// logits (B, T, V), targets (B, T) -> the mean over the targets that are not -100.
inline torch::Tensor lm_token_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

struct LanguageModelBatches {
  std::vector<torch::Tensor> x, y;
};

inline LanguageModelBatches lm_batches(const LanguageModelCase& c) {
  LanguageModelBatches b;
  torch::manual_seed(17);
  for (int s = 0; s < kLmSteps; ++s) {
    b.x.push_back(torch::randint(c.vocab, {kLmBatch, kLmTokens}, torch::kLong));
    torch::Tensor y = torch::randint(c.vocab, {kLmBatch, kLmTokens}, torch::kLong);
    if (c.masked) {
      torch::Tensor keep = torch::zeros({kLmBatch, kLmTokens}, torch::kBool);
      for (int64_t r = 0; r < kLmBatch; ++r)
        keep[r].index_fill_(0, torch::randperm(kLmTokens).narrow(0, 0, kLmMasked), true);
      y.masked_fill_(keep.logical_not(), -100);
    }
    b.y.push_back(y);
  }
  return b;
}

struct LanguageModelReference {
  std::map<std::string, torch::Tensor> params;
  std::vector<double> losses, norms;
  torch::Tensor eval_logits;  // the trained model's on b.x[0]
};

inline LanguageModelReference lm_single_process(const LanguageModelCase& c,
                                                const LanguageModelBatches& b) {
  torch::nn::AnyModule model = c.make();
  auto& m = *model.ptr();
  auto optimizer = lm_sgd(m.parameters());
  LanguageModelReference r;
  for (int s = 0; s < kLmSteps; ++s) {
    torch::Tensor loss = lm_token_loss(model.forward(b.x[s]), b.y[s]);
    r.losses.push_back(loss.item<double>());
    loss.backward();
    r.norms.push_back(torch::nn::utils::clip_grad_norm_(m.parameters(), kLmMaxNorm));
    optimizer->step();
    optimizer->zero_grad();
  }
  for (const auto& p : m.named_parameters()) r.params[p.key()] = p.value().detach().clone();
  m.eval();
  torch::NoGradGuard no_grad;
  r.eval_logits = model.forward(b.x[0]);
  return r;
}

inline void expect_lm_close(const torch::Tensor& got, const torch::Tensor& want,
                            const std::string& what) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, kLmTolerance * scale + 1e-6)
      << what << ": max |diff| " << diff << " at scale " << scale;
}

inline void expect_lm_parameters(const torch::nn::Module& model, const LanguageModelReference& want,
                                 const std::string& what) {
  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), want.params.size()) << what;
  for (const auto& p : params)
    expect_lm_close(p.value(), want.params.at(p.key()), what + " " + p.key());
}

// Trains `c` under `layout` on rank r = (d * P + s) * T + t (replica d, stage s, tensor rank t,
// as mesh.h orders them) and checks it against one process (see the top of this file).
inline void expect_layout_trains_as_one_process(const LanguageModelCase& c,
                                                const LanguageModelLayout& layout) {
  const LanguageModelBatches b = lm_batches(c);
  const LanguageModelReference want = lm_single_process(c, b);
  const int p = layout.stages, t = layout.tensor, replicas = layout.world / (p * t);
  std::vector<torch::nn::AnyModule> models;
  for (int r = 0; r < layout.world; ++r) models.push_back(c.make());
  std::mutex mutex;
  std::map<std::pair<int, int>, torch::Tensor> tied;  // (rank, step): its copy of the tied rows
  std::string saved;
  auto errors = run_ranks(layout.world, [&](int rank, dist::Context& context) {
    parallel::PipelineOptions pipeline;
    pipeline.stages = p;
    pipeline.schedule = layout.schedule;
    pipeline.stages_per_rank = layout.stages_per_rank;
    pipeline.microbatches = layout.microbatches;
    pipeline.model_name = c.model_name;
    const auto checkpointing = models::parse_activation_checkpointing(layout.checkpointing);
    std::unique_ptr<parallel::Plan> plan;
    parallel::TensorParallelPlan* split = nullptr;
    if (t > 1) {
      parallel::TensorParallelOptions options;
      options.size = t;
      options.sequence_parallel = layout.sequence_parallel;
      options.checkpointing = checkpointing;
      options.shard = layout.shard;
      options.model_name = c.model_name;
      if (p > 1) options.pipeline = pipeline;
      auto made =
          std::make_unique<parallel::TensorParallelPlan>(models[rank], context, lm_sgd, options);
      split = made.get();
      ASSERT_EQ(split->tensor_rank(), rank % t);
      ASSERT_EQ(split->pipeline() != nullptr, p > 1);
      if (p > 1) ASSERT_EQ(split->pipeline()->pipeline_rank(), rank / t % p);
      plan = std::move(made);
    } else {
      pipeline.checkpointing = checkpointing;
      pipeline.shard = layout.shard;
      pipeline.sample_shape = {kLmTokens};
      pipeline.sample_dtype = torch::kLong;
      auto made = std::make_unique<parallel::PipelinePlan>(models[rank], context, lm_sgd, pipeline);
      ASSERT_EQ(made->pipeline_rank(), rank % p);
      ASSERT_EQ(made->replica(), rank / p);
      plan = std::move(made);
    }
    const int replica = rank / (p * t), stage = rank / t % p;
    for (int s = 0; s < kLmSteps; ++s) {
      const int64_t n = kLmBatch / replicas;
      parallel::MicroBatch mb;
      mb.input = b.x[s].narrow(0, replica * n, n);
      mb.target = b.y[s].narrow(0, replica * n, n);
      mb.loss = lm_token_loss;  // under tensor parallelism, the vocabulary-parallel loss instead
      mb.learning_rate = 0.5;
      parallel::MicroBatchResult out = plan->forward_backward(mb, true);
      if (p > 1) ASSERT_EQ(out.loss.defined(), stage == 0) << "rank " << rank << " step " << s;
      if (stage == 0 && replicas == 1) {
        EXPECT_NEAR(out.loss.item<double>(), want.losses[s], kLmTolerance * want.losses[s])
            << "rank " << rank << " step " << s;
        // Tensor parallel: the predictions, the whole vocabulary's argmax (token ids).
        if (split != nullptr) EXPECT_EQ(out.output.sizes(), b.x[s].sizes()) << "rank " << rank;
      }
      const double norm = plan->clip_grad_norm(kLmMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], kLmTolerance * want.norms[s])
          << "rank " << rank << " step " << s;
      plan->step();
      plan->zero_grad();
      if (layout.shard == parallel::ShardMode::kNone && (stage == 0 || stage == p - 1)) {
        // A split model's own rows; else the whole model's tensor, shared with the stage.
        auto params = split ? split->split_module().named_parameters()
                            : models[rank].ptr()->named_parameters();
        std::lock_guard<std::mutex> lock(mutex);
        tied[{rank, s}] = params[c.tied].detach().clone();
      }
    }
    if (split != nullptr) {
      expect_replica_evaluation(*plan, rank, layout.world, replica, replicas,
                                stage == 0 && split->tensor_rank() == 0, b.x[0],
                                [&](const torch::Tensor& logits) {
                                  expect_lm_close(logits, want.eval_logits,
                                                  fmt::format("rank {} evaluation logits", rank));
                                });
    }
    expect_lm_parameters(*plan->module().ptr(), want, fmt::format("rank {}", rank));
    torch::serialize::OutputArchive model, optimizer;
    plan->state_dict(model, optimizer);
    if (rank == 0) {
      std::ostringstream out;
      model.save_to(out);
      saved = out.str();
    }
  });
  EXPECT_ALL_RANKS_OK(errors);

  // Each tensor rank's tied rows: its first stage's copy and its last stage's, bitwise equal.
  for (int first = 0; first < layout.world && p > 1; ++first) {
    if (layout.shard != parallel::ShardMode::kNone || first / t % p != 0) continue;
    const int last = first + (p - 1) * t;
    for (int s = 0; s < kLmSteps; ++s) {
      ASSERT_TRUE(tied.count({first, s}) && tied.count({last, s}));
      const torch::Tensor& a = tied.at({first, s});
      const torch::Tensor& z = tied.at({last, s});
      EXPECT_TRUE(torch::equal(a, z))
          << "step " << s << ": " << c.tied << " on ranks " << first << " and " << last
          << " differs by " << (a - z).abs().max().item<double>();
    }
  }
  // The checkpoint is the unsplit model's: it loads into one process.
  ASSERT_FALSE(saved.empty());
  torch::nn::AnyModule one = c.make();
  std::istringstream in(saved);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  one.ptr()->load(archive);
  expect_lm_parameters(*one.ptr(), want, "loaded into one process");
}

}  // namespace ddpx::test
