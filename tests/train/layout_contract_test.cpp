// The layout contract: every combination the mesh allows on 8 ranks, built as `ddpx train`
// builds it (train::mesh_of, then train::choose_plan: the flags become a mesh, the transforms
// and a schedule), trains a language model exactly as one process does on the same global batches.
// Two model families, each a small one of its kind: a 4-layer GPT (next-token batches) and a
// 4-layer BERT (masked-LM batches: 3 labelled tokens a window, the rest -100, so every replica's
// and micro-batch's mean averages to the global batch's). Each layout runs 4 steps of SGD with
// momentum and weight decay, each clipped by the whole model's gradient norm; checked: each
// step's loss (the mean over the data-parallel replicas) and gradient norm, the final parameters
// through module(), the whole state_dict() (model and optimizer) resumed twice, under the next
// layout of the family's list (load_state_dict(), as --resume does) and by one process, each
// continuing the one-process curve for 2 steps (a checkpoint taken under any layout continues
// under another), and rank 0's collective bytes in a step against docs/distributed.md's formulas,
// the job's group and the tensor group apart. GPT layouts: data parallel alone and with each ZeRO
// stage; pipelines (1F1B, GPipe, interleaved, 4 stages) over data-parallel replicas, whole or
// sharded; tensor parallelism over replicas, with sequence parallelism; the three together; each
// family with and without ZeRO-3 and activation checkpointing. BERT layouts: the same families
// where a language model's split matters (tensor and sequence parallel, pipelines incl.
// interleaved, the three together, ZeRO-3 and recomputed blocks), TP2 x PP2 resumed under
// ZeRO-3 data parallelism. Each rank is a real member of a Gloo group on 127.0.0.1 (a thread of
// this process).
//
// Tolerance: 2e-5 relative (plus 1e-6 absolute), as the 3-D mesh's own tests: the replicas'
// halves of the batch, the micro-batches, the split matrix products and the vocabulary slices'
// sums are added in another order than one process's batch, grown over 4 steps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/context.h"
#include "distributed/ranks.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "trace/collective_trace.h"
#include "train/plan_choice.h"

// Its own namespace: the test binary compiles its files together (a unity build).
namespace ddpx::train::layout_contract {
namespace {

using parallel::PipelineSchedule;
using parallel::ShardMode;
using test::error_text;
using test::run_ranks;

constexpr int kWorld = 8;
constexpr int kSteps = 4;        // under the layout
constexpr int kResumeSteps = 2;  // then in one process, from the layout's state_dict()
constexpr int64_t kBatch = 16;   // global windows a step
constexpr int64_t kTokens = 8;
constexpr int64_t kMasked = 3;  // a masked LM's labelled tokens a window
constexpr int64_t kVocab = 40;  // padded over the tensor ranks (--vocab_divisible_by 8)
constexpr int64_t kWidth = 16;  // both families' hidden size
constexpr int64_t kBlocks = 4;
constexpr double kLearningRate = 0.5;
constexpr double kMaxNorm = 1.0;
constexpr double kTolerance = 2e-5;

torch::nn::AnyModule make_gpt() {
  torch::manual_seed(5);
  models::GptOptions o;
  o.vocab_size = kVocab;
  o.block_size = 16;
  o.n_layer = kBlocks;
  o.n_head = 2;
  o.n_embd = kWidth;
  return torch::nn::AnyModule(models::Gpt(o));
}

// bert-nano's shape, smaller; the decoder's bias drawn, so that its split and its step count.
torch::nn::AnyModule make_bert() {
  torch::manual_seed(5);
  models::BertOptions o;
  o.vocab_size = kVocab;
  o.hidden_size = kWidth;
  o.num_hidden_layers = kBlocks;
  o.num_attention_heads = 2;
  o.intermediate_size = 32;
  o.max_position_embeddings = 16;
  models::Bert bert(o);
  torch::NoGradGuard no_grad;
  bert->cls->predictions->bias.normal_(0, 0.5);
  return torch::nn::AnyModule(bert);
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(kLearningRate).momentum(0.9).weight_decay(1e-2));
}

// logits (B, T, V), targets (B, T) -> the mean over the targets that are not -100.
torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

struct Layout {
  const char* name;
  int pipeline = 1, tensor = 1;
  ShardMode shard = ShardMode::kNone;
  const char* checkpointing = "none";
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages_per_rank = 0;
  bool sequence_parallel = false;
};

// A model family the suite holds to one process: its small model, its batches' kind, the prefix
// of its blocks' parameters (ZeRO-3 gathers each block twice a step, the rest once) and its
// layouts, in an order where each resumes its predecessor's state (the last the first's).
struct Family {
  const char* name;   // "gpt", "bert"
  const char* model;  // TrainOptions::model
  torch::nn::AnyModule (*make)();
  bool masked;  // masked-LM labels, else next-token ones
  const char* blocks;
  // Under sequence parallelism, the parameters that run on each rank's share of the tokens
  // (their gradients summed over the tensor group), by a part of their names.
  std::vector<const char*> on_token_shares;
  // Under sequence parallelism its head gathers its input again in backward (BERT's decoder is
  // gather_tokens_linear), rather than keep it (the GPT's).
  bool head_gathers_again;
  std::vector<Layout> layouts;
};

struct Batches {
  std::vector<torch::Tensor> x, y;
};

Batches make_batches(const Family& f) {
  Batches b;
  torch::manual_seed(17);
  for (int s = 0; s < kSteps + kResumeSteps; ++s) {
    b.x.push_back(torch::randint(kVocab, {kBatch, kTokens}, torch::kLong));
    torch::Tensor y = torch::randint(kVocab, {kBatch, kTokens}, torch::kLong);
    if (f.masked) {
      torch::Tensor keep = torch::zeros({kBatch, kTokens}, torch::kBool);
      for (int64_t r = 0; r < kBatch; ++r)
        keep[r].index_fill_(0, torch::randperm(kTokens).narrow(0, 0, kMasked), true);
      y.masked_fill_(keep.logical_not(), -100);
    }
    b.y.push_back(y);
  }
  return b;
}

using Parameters = std::map<std::string, torch::Tensor>;

Parameters parameters_of(const torch::nn::Module& m) {
  Parameters out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// One optimizer step of one process on the global batch `s`: its loss and gradient norm.
std::pair<double, double> one_process_step(torch::nn::AnyModule& model,
                                           torch::optim::Optimizer& optimizer, const Batches& b,
                                           int s) {
  torch::Tensor loss = token_loss(model.forward(b.x[s]), b.y[s]);
  loss.backward();
  const double norm = torch::nn::utils::clip_grad_norm_(model.ptr()->parameters(), kMaxNorm);
  optimizer.step();
  optimizer.zero_grad();
  return {loss.item<double>(), norm};
}

struct Reference {
  Batches batches;
  std::vector<double> losses, norms;
  Parameters after_layout, after_resume;  // after kSteps, and after the kResumeSteps more
};

const Reference& reference(const Family& f) {
  static std::map<std::string, Reference> made;  // the tests run one at a time
  auto found = made.find(f.name);
  if (found != made.end()) return found->second;
  Reference r;
  r.batches = make_batches(f);
  auto model = f.make();
  auto optimizer = make_sgd(model.ptr()->parameters());
  for (int s = 0; s < kSteps + kResumeSteps; ++s) {
    auto [loss, norm] = one_process_step(model, *optimizer, r.batches, s);
    r.losses.push_back(loss);
    r.norms.push_back(norm);
    if (s + 1 == kSteps) r.after_layout = parameters_of(*model.ptr());
  }
  r.after_resume = parameters_of(*model.ptr());
  return made.emplace(f.name, std::move(r)).first->second;
}

void expect_parameters(const Parameters& got, const Parameters& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << what << ": no " << name;
    const double scale = w.abs().max().item<double>();
    const double diff = (got.at(name) - w).abs().max().item<double>();
    EXPECT_LE(diff, kTolerance * scale + 1e-6)
        << what << " " << name << ": max |diff| " << diff << " at scale " << scale;
  }
}

TrainOptions options_of(const Family& f, const Layout& l) {
  TrainOptions o;
  o.model = f.model;
  o.pipeline_parallel = l.pipeline;
  o.tensor_parallel = l.tensor;
  o.shard = l.shard;
  o.activation_checkpointing = l.checkpointing;
  o.pipeline_schedule = l.schedule;
  o.stages_per_rank = l.stages_per_rank;
  o.pipeline_balance = parallel::PipelineBalance::kParams;  // no timing: the same cut each run
  o.sequence_parallel = l.sequence_parallel;
  o.vocab_divisible_by = 8;
  o.clip_grad_norm = kMaxNorm;
  o.shard_gather_dtype = GatherDtype::kFp32;
  return o;
}

constexpr auto kNone = ShardMode::kNone;
constexpr auto kFull = ShardMode::kFull;
constexpr auto k1F1B = PipelineSchedule::k1F1B;
constexpr auto kInterleaved = PipelineSchedule::kInterleaved;
constexpr auto kGpipe = PipelineSchedule::kGpipe;

const Family kGpt{
    "gpt",
    "gpt-nano",
    make_gpt,
    /*masked=*/false,
    "transformer.h.",
    {"ln_1.", "ln_2.", "c_proj.bias", "ln_f."},
    /*head_gathers_again=*/false,
    {// Data parallel alone, then each ZeRO stage, with and without recomputed blocks.
     Layout{"dp8"}, Layout{"dp8_ac", 1, 1, kNone, "blocks"},
     Layout{"dp8_zero1", 1, 1, ShardMode::kOptimizer},
     Layout{"dp8_zero2", 1, 1, ShardMode::kGradients}, Layout{"dp8_zero3", 1, 1, kFull},
     Layout{"dp8_zero3_ac", 1, 1, kFull, "blocks"},
     // Pipelines over data-parallel replicas.
     Layout{"dp4_pp2", 2}, Layout{"dp4_pp2_gpipe_ac", 2, 1, kNone, "blocks", kGpipe},
     Layout{"dp4_pp2_interleaved", 2, 1, kNone, "none", kInterleaved, 2},
     Layout{"dp4_pp2_zero3_ac", 2, 1, kFull, "blocks"}, Layout{"dp2_pp4", 4},
     // Tensor parallelism over data-parallel replicas.
     Layout{"dp4_tp2", 1, 2}, Layout{"dp4_tp2_sp_ac", 1, 2, kNone, "blocks", k1F1B, 0, true},
     Layout{"dp4_tp2_zero3", 1, 2, kFull},
     // The three together.
     Layout{"dp2_pp2_tp2", 2, 2},
     Layout{"dp2_pp2_tp2_sp_zero3_ac", 2, 2, kFull, "blocks", k1F1B, 0, true},
     Layout{"pp4_tp2", 4, 2}}};

// BERT where its split differs from the GPT's: the MLM head and its bias, the embeddings'
// LayerNorm, the tied decoder under a pipeline. TP2 x PP2 resumes under ZeRO-3 data parallelism.
const Family kBert{
    "bert",
    "bert-nano",
    make_bert,
    /*masked=*/true,
    "bert.encoder.layer.",
    {"output.dense.bias", "output.LayerNorm.", "cls.predictions.transform."},
    /*head_gathers_again=*/true,
    {Layout{"dp4_tp2", 1, 2}, Layout{"dp4_tp2_sp_ac", 1, 2, kNone, "blocks", k1F1B, 0, true},
     Layout{"dp4_pp2_interleaved", 2, 1, kNone, "none", kInterleaved, 2},
     Layout{"dp4_pp2_zero3_ac", 2, 1, kFull, "blocks"}, Layout{"pp4_tp2", 4, 2},
     Layout{"dp2_pp2_tp2_sp_zero3_ac", 2, 2, kFull, "blocks", k1F1B, 0, true},
     Layout{"dp2_pp2_tp2", 2, 2}, Layout{"dp8_zero3_ac", 1, 1, kFull, "blocks"}}};

// Rank 0's bytes in a step, by group (trace::Entry::group: "tensor", a pipeline link's name;
// empty for the job's group), then by collective.
using StepBytes = std::map<std::string, std::map<std::string, int64_t>>;

// A layout's run: each step's loss (the mean over the replicas) and, from rank 0, the whole
// state_dict() it ends with and its collectives in its last step.
struct LayoutRun {
  std::vector<double> losses;
  StepBytes last_step_bytes;
  std::string model_bytes, optimizer_bytes;
  // Rank 0's parameters as it holds them (Plan::held_tensors(): its stage's or pieces', or their
  // ZeRO-3 shards): elements in all and in the blocks.
  int64_t held_numel = 0, held_block_numel = 0;
};

// Trains `layout` on 8 ranks over global steps [first, first + steps), from the state `from`
// (a run's state_dict(), loaded through load_state_dict() as --resume does) or from the seed's
// model; checks each step's gradient norm and the final parameters (module()) against one
// process.
LayoutRun train_layout(const Family& family, const Layout& layout, int first, int steps,
                       const LayoutRun* from, const Parameters& want_after) {
  const Reference& want = reference(family);
  const Batches& batches = want.batches;
  const TrainOptions o = options_of(family, layout);
  const parallel::Mesh mesh = mesh_of(o, kWorld);
  const int replicas = mesh.data_size();
  EXPECT_EQ(kBatch % replicas, 0);
  const int64_t per_replica = kBatch / replicas;
  const std::string what = fmt::format("{} {}", family.name, layout.name);

  std::vector<torch::nn::AnyModule> models;
  for (int r = 0; r < kWorld; ++r) models.push_back(family.make());
  std::mutex mutex;
  std::map<std::pair<int, int>, double> losses;  // (step, data rank): the replica's loss
  LayoutRun run;
  auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
    TrainOptions mine = o;
    mine.batch_size = per_replica;
    ChosenPlan chosen = choose_plan(mine, context, mesh, models[rank], make_sgd,
                                    /*loss_scaling=*/false, {kTokens}, torch::kLong);
    parallel::Plan& plan = *chosen.plan;
    if (from != nullptr) {
      std::istringstream m(from->model_bytes), op(from->optimizer_bytes);
      torch::serialize::InputArchive model, optimizer;
      model.load_from(m);
      optimizer.load_from(op);
      plan.load_state_dict(model, optimizer);
    }
    const int data_rank = mesh.data_rank(rank);
    for (int s = first; s < first + steps; ++s) {
      const auto trace = context.trace();
      const uint64_t before = trace != nullptr && !trace->snapshot().entries.empty()
                                  ? trace->snapshot().entries.back().seq
                                  : 0;
      parallel::MicroBatch mb;
      mb.input = batches.x[s].narrow(0, data_rank * per_replica, per_replica);
      mb.target = batches.y[s].narrow(0, data_rank * per_replica, per_replica);
      mb.loss = token_loss;  // under tensor parallelism, the vocabulary-parallel loss instead
      mb.learning_rate = kLearningRate;
      mb.step = s;
      parallel::MicroBatchResult out = plan.forward_backward(mb, /*sync=*/true);
      const double norm = plan.clip_grad_norm(kMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], kTolerance * want.norms[s])
          << what << ": rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
      if (rank == 0 && s + 1 == first + steps && trace != nullptr) {
        const auto entries = trace->snapshot().entries;
        // The ring keeps the last trace::kRing: the whole step must still be in it.
        EXPECT_TRUE(!entries.empty() && entries.front().seq <= before + 1)
            << what << ": the step's collectives overflowed the record's ring";
        for (const auto& e : entries)
          if (e.seq > before) run.last_step_bytes[e.group][e.sig.op] += e.sig.bytes();
      }
      if (out.loss.defined()) {
        std::lock_guard<std::mutex> lock(mutex);
        losses[{s, data_rank}] = out.loss.item<double>();
      }
    }
    expect_parameters(parameters_of(*plan.module().ptr()), want_after,
                      fmt::format("{}: rank {}'s module()", what, rank));
    if (rank == 0) {
      for (const auto& held : plan.held_tensors()) {
        if (!held.tensor.requires_grad()) continue;  // a buffer
        run.held_numel += held.tensor.numel();
        if (held.name.rfind(family.blocks, 0) == 0) run.held_block_numel += held.tensor.numel();
      }
    }
    torch::serialize::OutputArchive model, optimizer;
    plan.state_dict(model, optimizer);
    if (rank == 0) {
      std::ostringstream m, op;
      model.save_to(m);
      optimizer.save_to(op);
      run.model_bytes = m.str();
      run.optimizer_bytes = op.str();
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  // Each step's loss: every replica reported one, and their mean is one process's.
  for (int s = first; s < first + steps; ++s) {
    double sum = 0;
    for (int d = 0; d < replicas; ++d) {
      EXPECT_TRUE(losses.count({s, d})) << what << ": no loss of replica " << d;
      if (losses.count({s, d})) sum += losses.at({s, d});
    }
    run.losses.push_back(sum / replicas);
    EXPECT_NEAR(sum / replicas, want.losses[s], kTolerance * want.losses[s])
        << what << ": step " << s;
  }
  return run;
}

// A parameter's elements as ZeRO shards it over n ranks: its rows rounded up to a multiple of n.
int64_t sharded_numel(const torch::Tensor& p, int64_t n) {
  const int64_t rows = p.dim() == 0 ? 1 : p.size(0),
                columns = p.numel() / std::max<int64_t>(rows, 1);
  return (rows + n - 1) / n * n * columns;
}

// What rank 0 sends in a step through the job's group and the pipeline's links, as the
// collective record counts it, against docs/distributed.md's "Communication and memory per
// step" (4 bytes a parameter; sharded, each parameter's rows rounded up to a multiple of the 8
// ranks): DDP all-reduces 4Ψ; ZeRO-1/2 reduce-scatter 4Ψ and all-gather 4Ψ;
// ZeRO-3 reduce-scatters 4Ψ and gathers every block in forward and again in backward, the root
// (embeddings, final norm, head) once; a pipeline's first stage sends each micro-batch's
// activations (b x T x D) and receives their gradients, the loss and the predictions (8 bytes a
// token); the sharded and pipeline plans' gradient norm is one all-reduced double. The replicas
// of a stage or of a tensor rank are expect_replica_bytes()'s: a layout with tensor parallelism
// has only the norm here (and its pipeline's sends, not counted here), nor an interleaved
// pipeline's several boundaries a rank.
void expect_job_bytes(const Family& family, const Layout& layout, const StepBytes& got) {
  std::map<std::string, int64_t> mine;  // every group's but the tensor group's and replicas'
  for (const auto& [group, ops] : got) {
    if (group == "tensor" || group == "pipeline_replicas" || group == "tensor_replicas") continue;
    for (const auto& [op, bytes] : ops) mine[op] += bytes;
  }
  if (layout.schedule == kInterleaved || (layout.tensor > 1 && layout.pipeline > 1)) return;
  auto model = family.make();
  int64_t psi = 0, blocks = 0;  // as sharded over the 8 ranks where they are
  for (const auto& p : model.ptr()->named_parameters()) {
    const int64_t n = layout.shard == kNone ? p.value().numel() : sharded_numel(p.value(), kWorld);
    psi += n;
    if (p.key().rfind(family.blocks, 0) == 0) blocks += n;
  }
  std::map<std::string, int64_t> want;
  if (layout.tensor > 1) {
    // The norm goes through the tensor group unless the pieces are sharded.
    if (layout.shard != kNone) want = {{"allreduce", 8}};
  } else if (layout.pipeline > 1) {
    const int64_t per_replica = kBatch / (kWorld / layout.pipeline);
    const int64_t activations = per_replica * kTokens * kWidth * 4;
    // The norm, and the tied embedding's gradient summed between the first and the last stage.
    want = {{"send", activations},
            {"recv", activations + 4 + per_replica * kTokens * 8},
            {"allreduce", 8 + 4 * kVocab * kWidth}};
  } else if (layout.shard == ShardMode::kNone) {
    want = {{"allreduce", 4 * psi}};
  } else if (layout.shard == ShardMode::kFull) {
    want = {{"reduce_scatter_tensor", 4 * psi},
            {"allgather_into_tensor", 4 * (psi - blocks) + 2 * 4 * blocks},
            {"allreduce", 8}};
  } else {
    want = {
        {"reduce_scatter_tensor", 4 * psi}, {"allgather_into_tensor", 4 * psi}, {"allreduce", 8}};
  }
  EXPECT_EQ(mine, want) << family.name << " " << layout.name
                        << ": rank 0's bytes in its last step through the job's group, by "
                           "collective";
}

// What rank 0 sends in a step through its replicas' group under a pipeline ("pipeline_replicas":
// the ranks of its stage) or tensor parallelism alone ("tensor_replicas": those of its tensor
// rank), from Ψ_r, the parameters it holds (held_tensors(); ZeRO-3's shards, each 1/R of its
// parameter's rows rounded up to the R replicas, so R x theirs is the padded Ψ_r): DDP
// all-reduces 4Ψ_r; ZeRO-3 reduce-scatters 4Ψ_r and all-gathers a pipeline's stage, one unit,
// once, and tensor parallelism's pieces as ZeRO-3 does the whole model, a unit a block gathered
// in forward and again in backward, the root once. Under the 3-D mesh the stages' replicas are
// "pipeline_replicas"; the tensor rank's group carries its pipeline's loss (not counted here).
void expect_replica_bytes(const Layout& layout, const LayoutRun& run) {
  const StepBytes& got = run.last_step_bytes;
  const std::string group = layout.pipeline > 1 ? "pipeline_replicas"
                            : layout.tensor > 1 ? "tensor_replicas"
                                                : "";
  if (group.empty()) return;  // data parallel alone: the job's group, expect_job_bytes()
  const int64_t replicas = kWorld / (layout.pipeline * layout.tensor);
  const std::string what = std::string(layout.name) + ": rank 0's bytes in its last step through " +
                           group + ", by collective";
  if (replicas == 1) {
    EXPECT_EQ(got.count(group), 0u) << what << ": a stage of one rank has no replicas";
    return;
  }
  ASSERT_EQ(got.count(group), 1u) << what << ": the replicas' group is recorded";
  std::map<std::string, int64_t> want;
  if (layout.shard == kNone) {
    want = {{"allreduce", 4 * run.held_numel}};
  } else {
    const int64_t padded = replicas * run.held_numel, blocks = replicas * run.held_block_numel;
    want = {{"reduce_scatter_tensor", 4 * padded},
            {"allgather_into_tensor", layout.pipeline > 1 ? 4 * padded : 4 * (padded + blocks)}};
  }
  EXPECT_EQ(got.at(group), want) << what;
}

// What rank 0 moves in a step through its tensor group, against docs/distributed.md's
// "Tensor-parallel bytes a step" (Megatron's collectives; rank 0 holds the first stage, and the
// last too without a pipeline). b windows of T tokens a replica (N = bT), width C, t tensor
// ranks, L blocks on the stage, A = 4NC the bytes of one activation (B, T, C); micro-batches do
// not change the sums. Without sequence parallelism: the embedding's all-reduce (A), each
// block's 2 all-reduces forward and 2 backward (4A; recomputed blocks 2A more), the head's
// backward all-reduce (A); the vocabulary-parallel loss all-gathers each token's largest logit
// (4tN) and all-reduces the sum of exponentials and the target's logit (8N); the predictions
// all-gather each rank's best logit and index in float64 (16tN); the gradient norm (8 bytes)
// when the tensor group holds the whole model (no pipeline, no ZeRO). With it: each block's
// all-reduces become an all-gather and a reduce-scatter of A forward, and backward a
// reduce-scatter and two all-gathers (the column-parallel layer gathers its input again: 6A
// gathered, 4A scattered a block), the head's all-gather (A) and reduce-scatter in backward,
// (BERT's head gathers again in backward: A more), the embedding's gradient all-gathered (A),
// and one all-reduce of the gradients of the layers that ran on each rank's share of the tokens
// (LayerNorms, row-parallel biases: 4 bytes each; under ZeRO the replica's shard of them).
void expect_tensor_bytes(const Family& family, const Layout& layout, const StepBytes& got) {
  const auto found = got.find("tensor");
  std::map<std::string, int64_t> mine;
  if (found != got.end()) mine = found->second;
  const std::string what = fmt::format("{} {}", family.name, layout.name);
  if (layout.tensor == 1) {
    EXPECT_TRUE(mine.empty()) << what << ": a tensor group without tensor parallelism";
    return;
  }
  const int64_t t = layout.tensor, replicas = kWorld / (layout.pipeline * t);
  const int64_t n = kBatch / replicas * kTokens, a = 4 * n * kWidth;
  const int64_t blocks = kBlocks / layout.pipeline;
  const int64_t recomputed = std::string(layout.checkpointing) == "none" ? 0 : blocks;
  const bool last = layout.pipeline == 1;  // rank 0's stage is the first; the last too
  // The parameters that ran on the token shares, on rank 0's stage.
  int64_t partials = 0;
  if (layout.sequence_parallel) {
    auto model = family.make();
    for (const auto& p : model.ptr()->named_parameters()) {
      const std::string& name = p.key();
      const bool shared = std::any_of(family.on_token_shares.begin(), family.on_token_shares.end(),
                                      [&](const char* s) { return name.find(s) != name.npos; });
      if (!shared) continue;
      const bool in_block = name.rfind(family.blocks, 0) == 0;
      const int64_t block =
          in_block ? std::stoll(name.substr(std::strlen(family.blocks))) : kBlocks;
      // Under ZeRO each replica sums its shard of them.
      const int64_t n =
          layout.shard == kNone ? p.value().numel() : sharded_numel(p.value(), replicas) / replicas;
      if ((in_block && block < blocks) || (!in_block && last)) partials += n;
    }
  }
  std::map<std::string, int64_t> want;
  if (!layout.sequence_parallel) {
    want["allreduce"] = a * (1 + 4 * blocks + 2 * recomputed + (last ? 1 : 0));
  } else {
    want["allreduce"] = a + 4 * partials;
    const int64_t head = last ? (family.head_gathers_again ? 2 : 1) : 0;
    want["allgather_into_tensor"] = a * (6 * blocks + 2 * recomputed + 1 + head);
    want["reduce_scatter_tensor"] = a * (4 * blocks + 2 * recomputed + (last ? 1 : 0));
  }
  if (last) {
    want["allreduce"] += 8 * n;
    want["allgather_into_tensor"] += 4 * t * n + 16 * t * n;
  }
  if (layout.pipeline == 1 && layout.shard == kNone) want["allreduce"] += 8;
  EXPECT_EQ(mine, want) << what << ": rank 0's bytes in its last step through its tensor group, "
                        << "by collective";
}

struct Case {
  const Family* family;
  int layout;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.family->name << "_" << c.family->layouts[c.layout].name;
}

std::vector<Case> cases(const Family& f) {
  std::vector<Case> out;
  for (size_t i = 0; i < f.layouts.size(); ++i) out.push_back({&f, static_cast<int>(i)});
  return out;
}

class LayoutContractTest : public ::testing::TestWithParam<Case> {};

TEST_P(LayoutContractTest, TrainsAsOneProcessAndResumesUnderTheNextLayoutAndInOne) {
  const Family& family = *GetParam().family;
  const Layout& layout = family.layouts[GetParam().layout];
  const Layout& next = family.layouts[(GetParam().layout + 1) % family.layouts.size()];
  const std::string what = fmt::format("{} {}", family.name, layout.name);
  const Reference& want = reference(family);
  const LayoutRun run = train_layout(family, layout, 0, kSteps, nullptr, want.after_layout);
  expect_job_bytes(family, layout, run.last_step_bytes);
  expect_replica_bytes(layout, run);
  expect_tensor_bytes(family, layout, run.last_step_bytes);
  ASSERT_FALSE(run.model_bytes.empty()) << what;

  // Its state_dict() resumed under the next layout of the list: the curve goes on.
  train_layout(family, next, kSteps, kResumeSteps, &run, want.after_resume);

  // And in one process: the state is the unsplit model's and its optimizer's.
  auto one = family.make();
  auto optimizer = make_sgd(one.ptr()->parameters());
  {
    std::istringstream m(run.model_bytes), op(run.optimizer_bytes);
    torch::serialize::InputArchive model_archive, optimizer_archive;
    model_archive.load_from(m);
    optimizer_archive.load_from(op);
    one.ptr()->load(model_archive);
    optimizer->load(optimizer_archive);
  }
  expect_parameters(parameters_of(*one.ptr()), want.after_layout, what + " loaded");
  for (int s = kSteps; s < kSteps + kResumeSteps; ++s) {
    auto [loss, norm] = one_process_step(one, *optimizer, want.batches, s);
    EXPECT_NEAR(loss, want.losses[s], kTolerance * want.losses[s])
        << what << ": resumed step " << s;
  }
  expect_parameters(parameters_of(*one.ptr()), want.after_resume, what + " resumed in one process");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.family->layouts[info.param.layout].name;
}

INSTANTIATE_TEST_SUITE_P(Gpt, LayoutContractTest, ::testing::ValuesIn(cases(kGpt)), case_name);
INSTANTIATE_TEST_SUITE_P(Bert, LayoutContractTest, ::testing::ValuesIn(cases(kBert)), case_name);
}  // namespace
}  // namespace ddpx::train::layout_contract
