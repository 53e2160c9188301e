// The layout contract: every combination the mesh allows on 8 ranks, built as `ddpx train`
// builds it (train::mesh_of, then train::choose_plan: the flags become a mesh, the transforms
// and a schedule), trains a GPT exactly as one process does on the same global batches. Each
// layout runs 4 steps of SGD with momentum and weight decay, each clipped by the whole model's
// gradient norm; checked: each step's loss (the mean over the data-parallel replicas) and
// gradient norm, the final parameters through module(), and the whole state_dict() (model and
// optimizer) resumed twice, under the next layout of the list (load_state_dict(), as --resume
// does) and by one process, each continuing the one-process curve for 2 steps (a checkpoint
// taken under any layout continues under another). Layouts: data parallel alone and
// with each ZeRO stage; pipelines (1F1B, GPipe, interleaved, 4 stages) over data-parallel
// replicas, whole or sharded; tensor parallelism over replicas, with sequence parallelism; the
// three together; each family with and without ZeRO-3 and activation checkpointing. Each rank is
// a real member of a Gloo group on 127.0.0.1 (a thread of this process).
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

#include <array>
#include <map>
#include <mutex>
#include <sstream>

#include "distributed/context.h"
#include "distributed/ranks.h"
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
constexpr int64_t kVocab = 40;  // padded over the tensor ranks (--vocab_divisible_by 8)
constexpr double kLearningRate = 0.5;
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
      params, torch::optim::SGDOptions(kLearningRate).momentum(0.9).weight_decay(1e-2));
}

torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

struct Batches {
  std::vector<torch::Tensor> x, y;
};

const Batches& batches() {
  static const Batches b = [] {
    Batches b;
    torch::manual_seed(17);
    for (int s = 0; s < kSteps + kResumeSteps; ++s) {
      b.x.push_back(torch::randint(kVocab, {kBatch, kTokens}, torch::kLong));
      b.y.push_back(torch::randint(kVocab, {kBatch, kTokens}, torch::kLong));
    }
    return b;
  }();
  return b;
}

using Parameters = std::map<std::string, torch::Tensor>;

Parameters parameters_of(const torch::nn::Module& m) {
  Parameters out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// One optimizer step of one process on the global batch `s`: its loss and gradient norm.
std::pair<double, double> one_process_step(models::Gpt& gpt, torch::optim::Optimizer& optimizer,
                                           int s) {
  torch::Tensor loss = token_loss(gpt->forward(batches().x[s]), batches().y[s]);
  loss.backward();
  const double norm = torch::nn::utils::clip_grad_norm_(gpt->parameters(), kMaxNorm);
  optimizer.step();
  optimizer.zero_grad();
  return {loss.item<double>(), norm};
}

struct Reference {
  std::vector<double> losses, norms;
  Parameters after_layout, after_resume;  // after kSteps, and after the kResumeSteps more
};

const Reference& reference() {
  static const Reference r = [] {
    Reference r;
    auto gpt = make_gpt();
    auto optimizer = make_sgd(gpt->parameters());
    for (int s = 0; s < kSteps + kResumeSteps; ++s) {
      auto [loss, norm] = one_process_step(gpt, *optimizer, s);
      r.losses.push_back(loss);
      r.norms.push_back(norm);
      if (s + 1 == kSteps) r.after_layout = parameters_of(*gpt);
    }
    r.after_resume = parameters_of(*gpt);
    return r;
  }();
  return r;
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

struct Layout {
  const char* name;
  int pipeline = 1, tensor = 1;
  ShardMode shard = ShardMode::kNone;
  const char* checkpointing = "none";
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages_per_rank = 0;
  bool sequence_parallel = false;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

TrainOptions options_of(const Layout& l) {
  TrainOptions o;
  o.model = "gpt-nano";
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

// Every layout, in an order where each resumes its predecessor's state (the last the first's).
constexpr auto kFull = ShardMode::kFull;
constexpr auto kInterleaved = PipelineSchedule::kInterleaved;
constexpr auto kGpipe = PipelineSchedule::kGpipe;

const std::array kLayouts{
    // Data parallel alone, then each ZeRO stage, with and without recomputed blocks.
    Layout{"dp8"}, Layout{"dp8_ac", 1, 1, ShardMode::kNone, "blocks"},
    Layout{"dp8_zero1", 1, 1, ShardMode::kOptimizer},
    Layout{"dp8_zero2", 1, 1, ShardMode::kGradients}, Layout{"dp8_zero3", 1, 1, kFull},
    Layout{"dp8_zero3_ac", 1, 1, kFull, "blocks"},
    // Pipelines over data-parallel replicas.
    Layout{"dp4_pp2", 2}, Layout{"dp4_pp2_gpipe_ac", 2, 1, ShardMode::kNone, "blocks", kGpipe},
    Layout{"dp4_pp2_interleaved", 2, 1, ShardMode::kNone, "none", kInterleaved, 2},
    Layout{"dp4_pp2_zero3_ac", 2, 1, kFull, "blocks"}, Layout{"dp2_pp4", 4},
    // Tensor parallelism over data-parallel replicas.
    Layout{"dp4_tp2", 1, 2},
    Layout{"dp4_tp2_sp_ac", 1, 2, ShardMode::kNone, "blocks", PipelineSchedule::k1F1B, 0, true},
    Layout{"dp4_tp2_zero3", 1, 2, kFull},
    // The three together.
    Layout{"dp2_pp2_tp2", 2, 2},
    Layout{"dp2_pp2_tp2_sp_zero3_ac", 2, 2, kFull, "blocks", PipelineSchedule::k1F1B, 0, true},
    Layout{"pp4_tp2", 4, 2}};

// A layout's run: each step's loss (the mean over the replicas) and, from rank 0, the whole
// state_dict() it ends with.
struct LayoutRun {
  std::vector<double> losses;
  std::map<std::string, int64_t> last_step_bytes;  // rank 0's collectives in its last step, by op
  std::string model_bytes, optimizer_bytes;
};

// Trains `layout` on 8 ranks over global steps [first, first + steps), from the state `from`
// (a run's state_dict(), loaded through load_state_dict() as --resume does) or from the seed's
// model; checks each step's gradient norm and the final parameters (module()) against one
// process.
LayoutRun train_layout(const Layout& layout, int first, int steps, const LayoutRun* from,
                       const Parameters& want_after) {
  const Reference& want = reference();
  const TrainOptions o = options_of(layout);
  const parallel::Mesh mesh = mesh_of(o, kWorld);
  const int replicas = mesh.data_size();
  EXPECT_EQ(kBatch % replicas, 0);
  const int64_t per_replica = kBatch / replicas;

  std::vector<models::Gpt> gpts;
  for (int r = 0; r < kWorld; ++r) gpts.push_back(make_gpt());
  std::mutex mutex;
  std::map<std::pair<int, int>, double> losses;  // (step, data rank): the replica's loss
  LayoutRun run;
  auto errors = run_ranks(kWorld, [&](int rank, dist::Context& context) {
    TrainOptions mine = o;
    mine.batch_size = per_replica;
    ChosenPlan chosen = choose_plan(mine, context, mesh, torch::nn::AnyModule(gpts[rank]), make_sgd,
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
      mb.input = batches().x[s].narrow(0, data_rank * per_replica, per_replica);
      mb.target = batches().y[s].narrow(0, data_rank * per_replica, per_replica);
      mb.loss = token_loss;
      mb.learning_rate = kLearningRate;
      mb.step = s;
      parallel::MicroBatchResult out = plan.forward_backward(mb, /*sync=*/true);
      const double norm = plan.clip_grad_norm(kMaxNorm).item<double>();
      EXPECT_NEAR(norm, want.norms[s], kTolerance * want.norms[s])
          << layout.name << ": rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
      if (rank == 0 && s + 1 == first + steps && trace != nullptr) {
        for (const auto& e : trace->snapshot().entries)
          if (e.seq > before) run.last_step_bytes[e.sig.op] += e.sig.bytes();
      }
      if (out.loss.defined()) {
        std::lock_guard<std::mutex> lock(mutex);
        losses[{s, data_rank}] = out.loss.item<double>();
      }
    }
    expect_parameters(parameters_of(*plan.module().ptr()), want_after,
                      fmt::format("{}: rank {}'s module()", layout.name, rank));
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
      EXPECT_TRUE(losses.count({s, d})) << layout.name << ": no loss of replica " << d;
      if (losses.count({s, d})) sum += losses.at({s, d});
    }
    run.losses.push_back(sum / replicas);
    EXPECT_NEAR(sum / replicas, want.losses[s], kTolerance * want.losses[s])
        << layout.name << ": step " << s;
  }
  return run;
}

// What rank 0 sends in a step through the job's group, as the collective record counts it,
// against docs/distributed.md's "Communication and memory per step" (4 bytes a parameter): DDP
// all-reduces 4Ψ; ZeRO-1/2 reduce-scatter 4Ψ and all-gather 4Ψ; ZeRO-3 reduce-scatters 4Ψ and
// gathers every block in forward and again in backward, the root (embeddings, final norm) once;
// a pipeline's first stage sends each micro-batch's activations (b x T x D) and receives their
// gradients, the loss and the predictions (8 bytes a token); the sharded and pipeline plans'
// gradient norm is one all-reduced double. The replica and tensor groups' collectives are not
// in this record (their groups are not the job's): a layout with tensor parallelism is not
// counted here, nor an interleaved pipeline's several boundaries a rank.
void expect_step_bytes(const Layout& layout, const std::map<std::string, int64_t>& got) {
  if (layout.tensor > 1 || layout.schedule == kInterleaved) return;
  auto gpt = make_gpt();
  int64_t psi = 0, blocks = 0;
  for (const auto& p : gpt->named_parameters()) {
    psi += p.value().numel();
    if (p.key().rfind("transformer.h.", 0) == 0) blocks += p.value().numel();
  }
  std::map<std::string, int64_t> want;
  if (layout.pipeline > 1) {
    const int64_t per_replica = kBatch / (kWorld / layout.pipeline);
    const int64_t activations = per_replica * kTokens * gpt->options().n_embd * 4;
    want = {{"send", activations},
            {"recv", activations + 4 + per_replica * kTokens * 8},
            {"allreduce", 8}};
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
  EXPECT_EQ(got, want) << layout.name << ": rank 0's bytes in its last step, by collective";
}

class LayoutContractTest : public ::testing::TestWithParam<int> {};

TEST_P(LayoutContractTest, TrainsAsOneProcessAndResumesUnderTheNextLayoutAndInOne) {
  const Layout& layout = kLayouts[GetParam()];
  const Layout& next = kLayouts[(GetParam() + 1) % kLayouts.size()];
  const Reference& want = reference();
  const LayoutRun run = train_layout(layout, 0, kSteps, nullptr, want.after_layout);
  expect_step_bytes(layout, run.last_step_bytes);
  ASSERT_FALSE(run.model_bytes.empty()) << layout.name;

  // Its state_dict() resumed under the next layout of the list: the curve goes on.
  train_layout(next, kSteps, kResumeSteps, &run, want.after_resume);

  // And in one process: the state is the unsplit GPT's and its optimizer's.
  auto one = make_gpt();
  auto optimizer = make_sgd(one->parameters());
  {
    std::istringstream m(run.model_bytes), op(run.optimizer_bytes);
    torch::serialize::InputArchive model_archive, optimizer_archive;
    model_archive.load_from(m);
    optimizer_archive.load_from(op);
    one->load(model_archive);
    optimizer->load(optimizer_archive);
  }
  expect_parameters(parameters_of(*one), want.after_layout, std::string(layout.name) + " loaded");
  for (int s = kSteps; s < kSteps + kResumeSteps; ++s) {
    auto [loss, norm] = one_process_step(one, *optimizer, s);
    EXPECT_NEAR(loss, want.losses[s], kTolerance * want.losses[s])
        << layout.name << ": resumed step " << s;
  }
  expect_parameters(parameters_of(*one), want.after_resume,
                    std::string(layout.name) + " resumed in one process");
}

INSTANTIATE_TEST_SUITE_P(EightRanks, LayoutContractTest,
                         ::testing::Range(0, static_cast<int>(kLayouts.size())),
                         [](const auto& info) { return std::string(kLayouts[info.param].name); });
}  // namespace
}  // namespace ddpx::train::layout_contract
