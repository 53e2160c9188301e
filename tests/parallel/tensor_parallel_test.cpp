// The tensor-parallel plan (parallel/tensor/) against one process training the unsplit model on
// the same global batches: a small ViT (4 heads, 2 blocks) split over 2 and 4 ranks, on a 2 x 2
// mesh of data x tensor, with and without sequence parallelism, and the MLP over 2 and 3 ranks.
// ViT-B/16 itself over 2 and 4 ranks (logits and gradients). Each rank is a real member of a Gloo
// group on 127.0.0.1. Checked: the first step's logits and
// loss on every rank, the first step's gradients of every parameter (the pieces gathered), the
// parameters and momenta after 4 SGD steps (through module() and through state_dict(), which loads
// into the unsplit model), a checkpoint of the single process loaded into the plan going on as the
// single process does, the collective record (exactly two all-reduces of the activations a block
// forward and two backward; with sequence parallelism all-gathers and reduce-scatters instead,
// and an all-gather again in backward before each column-parallel layer),
// clipping by the whole model's norm, a user's Sequential split with parallelize(), and the layouts
// refused before any collective.
//
// Tolerance: 1e-5 relative to the largest magnitude of each tensor (plus 1e-6 absolute): the
// split matrix products and the all-reduce sum in another order than one product.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "distributed/ranks.h"
#include "distributed/refused_ranks.h"
#include "models/mlp.h"
#include "models/vit.h"
#include "models/zoo/registry.h"
#include "parallel/plan_evaluation.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/split_reference.h"
#include "parallel/tensor/parallelize.h"
#include "parallel/tensor/tensor_parallel_plan.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace tensor_parallel_test {

using test::Batches;
using test::cross_entropy;
using test::error_text;
using test::expect_close;
using test::run_ranks;

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kClasses = 5;

enum class Net { kViT, kMlp };

models::ViTOptions vit_options() {
  models::ViTOptions o;
  o.image_size = 8;
  o.patch_size = 4;
  o.num_layers = 2;
  o.num_heads = 4;
  o.hidden_dim = 16;
  o.mlp_dim = 32;
  o.num_classes = kClasses;
  return o;
}

// `attention_dropout`: the ViT's, drawn inside the split attention.
torch::nn::AnyModule make_net(Net net, double attention_dropout = 0) {
  torch::manual_seed(11);
  if (net == Net::kMlp) {
    models::MlpOptions o;
    o.in_features = 3 * 8 * 8;
    o.hidden = 24;
    o.num_classes = kClasses;
    return torch::nn::AnyModule(models::Mlp(o));
  }
  models::ViTOptions o = vit_options();
  o.attention_dropout = attention_dropout;
  models::VisionTransformer vit(o);
  // torchvision zeroes the head: give it weights, so that the first step's gradients reach the
  // blocks.
  torch::NoGradGuard no_grad;
  for (auto& p : vit->heads->parameters()) p.normal_(0, 0.2);
  return torch::nn::AnyModule(vit);
}

// One process, with the first step's gradients.
struct Reference : test::SingleProcess {
  std::map<std::string, torch::Tensor> first_grads;
};

Reference single_process(Net net, const Batches& b) {
  Reference r;
  static_cast<test::SingleProcess&>(r) = test::train_single_process(
      make_net(net), b, kSteps, [](int, torch::nn::AnyModule&, torch::optim::Optimizer&) {},
      [&r](int s, torch::nn::AnyModule& model) {
        if (s != 0) return;
        for (const auto& p : model.ptr()->named_parameters())
          r.first_grads[p.key()] = p.value().grad().clone();
      });
  return r;
}

struct Layout {
  Net net;
  int world;
  int tensor;
  bool sequence = false;                                   // sequence parallel
  parallel::ShardMode shard = parallel::ShardMode::kNone;  // the replicas' pieces sharded
};

std::string layout_name(const Layout& l) {
  return fmt::format("{}_world{}_tensor{}{}{}", l.net == Net::kViT ? "vit" : "mlp", l.world,
                     l.tensor, l.sequence ? "_sequence" : "",
                     l.shard == parallel::ShardMode::kNone
                         ? ""
                         : std::string("_shard_") + parallel::name(l.shard));
}

class TensorParallelPlanTest : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorParallelPlanTest, TrainsAsTheSingleProcessAndSavesTheUnsplitModel) {
  const Layout layout = GetParam();
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(layout.net, b);
  std::vector<torch::nn::AnyModule> nets;
  for (int r = 0; r < layout.world; ++r) nets.push_back(make_net(layout.net));
  std::vector<std::string> saved(2);
  auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
    parallel::TensorParallelOptions options;
    options.size = layout.tensor;
    options.sequence_parallel = layout.sequence;
    options.shard = layout.shard;
    parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
    const int replicas = layout.world / layout.tensor;
    ASSERT_EQ(plan.replica(), rank / layout.tensor);
    ASSERT_EQ(plan.tensor_rank(), rank % layout.tensor);
    for (int s = 0; s < kSteps; ++s) {
      parallel::MicroBatch mb = test::replica_batch(b, s, plan.replica(), replicas);
      mb.learning_rate = 0.05;
      auto out = plan.forward_backward(mb, true);
      ASSERT_TRUE(out.loss.defined()) << "rank " << rank;
      if (s == 0) {
        const int64_t n = kGlobalBatch / replicas;
        expect_close(out.output, want.first_logits.narrow(0, plan.replica() * n, n),
                     fmt::format("rank {} first logits", rank));
      }
      if (replicas == 1) {
        EXPECT_NEAR(out.loss.item<double>(), want.losses[s], 1e-5 * want.losses[s])
            << "rank " << rank << " step " << s;
      }
      plan.step();
      plan.zero_grad();
    }
    // Evaluation on the pieces: each replica's share, the logits counted on its tensor rank 0.
    test::expect_replica_evaluation(
        plan, rank, layout.world, plan.replica(), replicas, plan.tensor_rank() == 0, b.x[0],
        [&](const torch::Tensor& logits) {
          expect_close(logits, want.eval_logits, fmt::format("rank {} evaluation logits", rank));
        });
    // While it trains and evaluates, a rank holds memory for its pieces and the unsplit layers
    // only (sharded: for their shards, tests/parallel/sharded_plan_test.cpp).
    std::set<const void*> storages;
    size_t held = 0, mine = 0, whole = 0;
    auto whole_params = nets[rank].ptr()->parameters(), pieces = plan.parameters();
    for (const auto* list : {&whole_params, &pieces}) {
      for (const auto& p : *list) {
        if (storages.insert(p.storage().unsafeGetStorageImpl()).second)
          held += p.storage().nbytes();
      }
    }
    for (const auto& p : pieces) mine += p.nbytes();
    for (const auto& p : whole_params) whole += p.numel() * p.element_size();
    // SGD's momentum: a buffer the size of each piece, or of the rank's shard of it (half, with
    // padding) when the replicas shard the pieces.
    size_t split_bytes = 0;
    for (const auto& p : plan.split_module().parameters()) split_bytes += p.numel() * 4;
    const double state = static_cast<double>(parallel::optimizer_state_bytes(plan.optimizer()));
    if (layout.shard == parallel::ShardMode::kNone) {
      EXPECT_DOUBLE_EQ(state, static_cast<double>(split_bytes)) << "rank " << rank;
    } else {
      EXPECT_LT(state, 0.6 * static_cast<double>(split_bytes))
          << "rank " << rank << ": not sharded";
    }
    if (layout.shard == parallel::ShardMode::kNone) {
      EXPECT_EQ(held, mine) << "rank " << rank << " holds the whole model's split layers";
      EXPECT_LT(mine, whole) << "rank " << rank;
    }
    test::expect_trained_and_keep_state(plan, rank, want.trained, saved);
  });
  EXPECT_ALL_RANKS_OK(errors);
  ASSERT_FALSE(saved[0].empty());

  // The checkpoint is the unsplit model's and optimizer's.
  test::expect_checkpoint_holds(saved, make_net(layout.net), want.trained);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorParallelPlanTest,
    ::testing::Values(Layout{Net::kViT, 2, 2}, Layout{Net::kViT, 4, 4}, Layout{Net::kViT, 4, 2},
                      Layout{Net::kMlp, 2, 2}, Layout{Net::kMlp, 3, 3},
                      // 5 tokens: shares of 3 and 2; of 2, 1, 1 and 1
                      Layout{Net::kViT, 2, 2, true}, Layout{Net::kViT, 4, 4, true},
                      Layout{Net::kViT, 4, 2, true},
                      // 2 replicas of 2 tensor ranks, each piece sharded
                      // over its 2 replicas (ZeRO-1/2/3)
                      Layout{Net::kViT, 4, 2, false, parallel::ShardMode::kOptimizer},
                      Layout{Net::kViT, 4, 2, false, parallel::ShardMode::kGradients},
                      Layout{Net::kViT, 4, 2, false, parallel::ShardMode::kFull},
                      // ... and sequence parallel: the partial gradients' shards summed
                      Layout{Net::kViT, 4, 2, true, parallel::ShardMode::kOptimizer},
                      Layout{Net::kViT, 4, 2, true, parallel::ShardMode::kFull},
                      Layout{Net::kMlp, 4, 2, false, parallel::ShardMode::kFull}),
    [](const auto& info) { return layout_name(info.param); });

// The first step's gradients: each piece gathered from the tensor group is the unsplit model's
// gradient of that parameter; the unsplit layers' gradients are whole on every rank.
TEST(TensorParallelGradientTest, EveryGradientIsTheUnsplitModelsOnTheSameBatch) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(Net::kViT, b);
  for (bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "sequence parallel" : "tensor parallel");
    std::vector<torch::nn::AnyModule> nets{make_net(Net::kViT), make_net(Net::kViT)};
    auto errors = run_ranks(2, [&](int rank, Context& context) {
      auto split = parallel::tensor::split_model(nets[rank], context, sequence);
      EXPECT_EQ(split.partial_grads.size(), sequence ? 12u : 0u) << "6 a block";
      cross_entropy(split.module.forward(b.x[0]), b.y[0]).backward();
      // Sequence parallel: what each rank's tokens gave, summed (the plan does this after
      // backward).
      for (const auto& name : split.partial_grads) {
        torch::Tensor g = split.module.ptr()->named_parameters()[name].grad();
        context.all_reduce_sum(g);
      }
      size_t checked = 0;
      for (const auto& p : split.module.ptr()->named_parameters()) {
        torch::Tensor grad = p.value().grad();
        ASSERT_TRUE(grad.defined()) << p.key();
        auto spec = split.specs.find(p.key());
        if (spec != split.specs.end()) {
          grad = parallel::tensor::gather_whole(grad, spec->second, context);
        }
        expect_close(grad, want.first_grads.at(p.key()),
                     fmt::format("rank {} grad {}", rank, p.key()));
        ++checked;
      }
      EXPECT_EQ(checked, want.first_grads.size()) << "every parameter of the model";
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// ViT-B/16 itself (12 blocks, 12 heads, width 768, MLP 3072; at 32x32: 5 tokens) split over 2
// and 4 ranks, and over 4 with sequence parallelism (5 tokens: 2, 1, 1, 1 a rank): the logits in
// evaluation mode and every parameter's gradient of one training batch are the unsplit model's
// within the tolerance above.
TEST(TensorParallelViTB16Test, LogitsAndGradientsAreTheSingleProcessOnTwoAndFourRanks) {
  const auto make = [] {
    torch::manual_seed(5);
    torch::nn::AnyModule model =
        models::create_model("vit_b_16", models::ModelConfig{10, 32, models::Stem::kImagenet});
    torch::NoGradGuard no_grad;  // torchvision zeroes the head; weights reach the blocks' grads
    for (auto& p : model.ptr()->named_parameters())
      if (p.key().rfind("heads.", 0) == 0) p.value().normal_(0, 0.02);
    return model;
  };
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  const torch::Tensor y = torch::tensor({3, 7}, torch::kLong);
  torch::nn::AnyModule whole = make();
  whole.ptr()->eval();
  const torch::Tensor want_logits = whole.forward(x).detach();
  whole.ptr()->train();
  cross_entropy(whole.forward(x), y).backward();
  std::map<std::string, torch::Tensor> want_grads;
  for (const auto& p : whole.ptr()->named_parameters()) want_grads[p.key()] = p.value().grad();

  for (const auto& [ranks, sequence] : {std::pair{2, false}, {4, false}, {4, true}}) {
    SCOPED_TRACE(fmt::format("{} ranks{}", ranks, sequence ? ", sequence parallel" : ""));
    std::vector<torch::nn::AnyModule> nets;
    for (int r = 0; r < ranks; ++r) nets.push_back(make());
    auto errors = run_ranks(ranks, [&](int rank, Context& context) {
      auto split = parallel::tensor::split_model(nets[rank], context, sequence);
      split.module.ptr()->eval();
      torch::Tensor logits;
      {
        torch::NoGradGuard no_grad;
        logits = split.module.forward(x);
      }
      expect_close(logits, want_logits, fmt::format("rank {} logits", rank));
      split.module.ptr()->train();
      cross_entropy(split.module.forward(x), y).backward();
      for (const auto& name : split.partial_grads) {
        torch::Tensor g = split.module.ptr()->named_parameters()[name].grad();
        context.all_reduce_sum(g);
      }
      for (const auto& p : split.module.ptr()->named_parameters()) {
        torch::Tensor grad = p.value().grad();
        ASSERT_TRUE(grad.defined()) << p.key();
        auto spec = split.specs.find(p.key());
        if (spec != split.specs.end())
          grad = parallel::tensor::gather_whole(grad, spec->second, context);
        expect_close(grad, want_grads.at(p.key()), fmt::format("rank {} grad {}", rank, p.key()));
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// A single process's checkpoint loads into the plan, which goes on as the single process does.
TEST(TensorParallelCheckpointTest, AWholeCheckpointLoadsAndTrainingGoesOnAsTheSingleProcess) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(Net::kViT, b);
  // The single process after 2 steps, saved.
  auto model = make_net(Net::kViT);
  auto optimizer = test::momentum_sgd(model.ptr()->parameters());
  for (int s = 0; s < 2; ++s) {
    cross_entropy(model.forward(b.x[s]), b.y[s]).backward();
    optimizer->step();
    optimizer->zero_grad();
  }
  std::ostringstream ms, os;
  torch::serialize::OutputArchive m, o;
  model.ptr()->save(m);
  optimizer->save(o);
  m.save_to(ms);
  o.save_to(os);
  // 2 tensor ranks; and 2 replicas of 2 whose pieces are sharded (ZeRO-3) over the replicas.
  for (const auto shard : {parallel::ShardMode::kNone, parallel::ShardMode::kFull}) {
    SCOPED_TRACE(parallel::name(shard));
    const int world = shard == parallel::ShardMode::kNone ? 2 : 4;
    std::vector<torch::nn::AnyModule> nets;
    for (int r = 0; r < world; ++r) nets.push_back(make_net(Net::kViT));
    auto errors = run_ranks(world, [&](int rank, Context& context) {
      parallel::TensorParallelOptions options;
      options.shard = shard;
      parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
      torch::serialize::InputArchive mi, oi;
      std::istringstream msi(ms.str()), osi(os.str());
      mi.load_from(msi);
      oi.load_from(osi);
      plan.load_state_dict(mi, oi);
      const int replicas = world / 2;
      for (int s = 2; s < kSteps; ++s) {
        parallel::MicroBatch mb = test::replica_batch(b, s, plan.replica(), replicas);
        mb.learning_rate = 0.05;
        plan.forward_backward(mb, true);
        plan.step();
        plan.zero_grad();
      }
      for (const auto& p : plan.module().ptr()->named_parameters())
        expect_close(p.value(), want.trained.params.at(p.key()),
                     fmt::format("rank {} {}", rank, p.key()));
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// Megatron's count: per block, one all-reduce of the activations after the attention and one
// after the MLP forward, and one of their gradients before each backward; nothing else moves in
// a step of a world that is one tensor-parallel group.
TEST(TensorParallelTrafficTest, TwoAllReducesABlockForwardAndTwoBackward) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const auto o = vit_options();
  const int64_t tokens = (o.image_size / o.patch_size) * (o.image_size / o.patch_size) + 1;
  const int64_t activation_bytes = kGlobalBatch * tokens * o.hidden_dim * 4;
  std::vector<torch::nn::AnyModule> nets{make_net(Net::kViT), make_net(Net::kViT)};
  std::vector<std::vector<trace::Signature>> sent(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    ASSERT_NE(context.trace(), nullptr);
    parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, {});
    plan.forward_backward(test::replica_batch(b, 0, 0, 1),
                          true);  // the first use wraps the replicas
    plan.step();
    plan.zero_grad();
    const uint64_t before = context.trace()->snapshot().entries.back().seq;
    plan.forward_backward(test::replica_batch(b, 1, 0, 1), true);
    plan.step();
    plan.zero_grad();
    for (const auto& e : context.trace()->snapshot().entries) {
      if (e.seq > before) sent[rank].push_back(e.sig);
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(sent[rank].size(), static_cast<size_t>(4 * o.num_layers)) << "rank " << rank;
    for (const auto& sig : sent[rank]) {
      EXPECT_EQ(sig.op, "allreduce") << sig.text();
      EXPECT_EQ(sig.bytes(), activation_bytes) << sig.text();
    }
  }
}

// Sequence parallel: the all-reduces become all-gathers and reduce-scatters of the same
// activations (each rank's share padded to ceil(S / T) tokens), plus entering and leaving the
// region (an all-gather each way) and one all-reduce of the LayerNorms' and biases' gradients.
// Backward gathers each column-parallel layer's input again (Megatron-LM's way: only a rank's
// share of it is kept): 6 all-gathers a block, 4 reduce-scatters.
TEST(TensorParallelTrafficTest, SequenceParallelAllGathersAndReduceScattersInstead) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const auto o = vit_options();
  const int64_t tokens = (o.image_size / o.patch_size) * (o.image_size / o.patch_size) + 1;
  const int64_t padded_bytes = 2 * ((tokens + 1) / 2) * kGlobalBatch * o.hidden_dim * 4;
  const int64_t partial_bytes = o.num_layers * (4 * o.hidden_dim + 2 * o.hidden_dim) * 4;
  std::vector<torch::nn::AnyModule> nets{make_net(Net::kViT), make_net(Net::kViT)};
  std::vector<std::map<std::string, std::vector<int64_t>>> sent(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::TensorParallelOptions options;
    options.sequence_parallel = true;
    parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
    plan.forward_backward(test::replica_batch(b, 0, 0, 1), true);
    plan.step();
    plan.zero_grad();
    const uint64_t before = context.trace()->snapshot().entries.back().seq;
    plan.forward_backward(test::replica_batch(b, 1, 0, 1), true);
    plan.step();
    plan.zero_grad();
    for (const auto& e : context.trace()->snapshot().entries) {
      if (e.seq > before) sent[rank][e.sig.op].push_back(e.sig.bytes());
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int rank = 0; rank < 2; ++rank) {
    auto& ops = sent[rank];
    EXPECT_EQ(ops["allgather_into_tensor"].size(), static_cast<size_t>(6 * o.num_layers + 2));
    EXPECT_EQ(ops["reduce_scatter_tensor"].size(), static_cast<size_t>(4 * o.num_layers));
    for (const char* op : {"allgather_into_tensor", "reduce_scatter_tensor"}) {
      for (int64_t bytes : ops[op]) EXPECT_EQ(bytes, padded_bytes) << op << " rank " << rank;
    }
    ASSERT_EQ(ops["allreduce"].size(), 1u) << "the LayerNorms' and biases' gradients, once";
    EXPECT_EQ(ops["allreduce"][0], partial_bytes);
    EXPECT_EQ(ops.size(), 3u) << "nothing else is sent";
  }
}

// clip_grad_norm() clips by the norm of the whole model's gradient, as one process would.
// Attention dropout on 2 tensor ranks: it drops (the first step's loss is not the dropout-free
// one), evaluation is the single process's (no dropout), the ranks stay in step (the unsplit
// parameters equal bit for bit) and one seed gives one run (each rank's region generator is
// seeded by the seed and its rank).
TEST(TensorParallelDropoutTest, AttentionDropoutDropsStaysInStepAndRepeats) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const Reference plain = single_process(Net::kViT, b);
  auto make = [] { return make_net(Net::kViT, 0.3); };
  std::vector<std::map<std::string, torch::Tensor>> finals(4);
  for (int run = 0; run < 2; ++run) {
    std::vector<torch::nn::AnyModule> nets{make(), make()};
    auto errors = run_ranks(2, [&](int rank, Context& context) {
      parallel::TensorParallelOptions options;
      options.size = 2;
      parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
      if (run == 0) {
        test::expect_replica_evaluation(
            plan, rank, 2, 0, 1, rank == 0, b.x[0], [&](const torch::Tensor& logits) {
              expect_close(logits, plain.first_logits, "evaluation logits without dropout");
            });
      }
      for (int s = 0; s < kSteps; ++s) {
        parallel::MicroBatch mb = test::replica_batch(b, s, 0, 1);
        mb.learning_rate = 0.05;
        auto out = plan.forward_backward(mb, true);
        if (s == 0) {
          EXPECT_GT(std::abs(out.loss.item<double>() - plain.losses[0]), 1e-4)
              << "rank " << rank << ": attention dropout dropped nothing";
        }
        plan.step();
        plan.zero_grad();
      }
      for (const auto& p : plan.module().ptr()->named_parameters())
        finals[run * 2 + rank][p.key()] = p.value().detach().clone();
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
  for (const auto& [name, value] : finals[0]) {
    EXPECT_TRUE(torch::equal(value, finals[1].at(name))) << name << ": the tensor ranks diverged";
    EXPECT_TRUE(torch::equal(value, finals[2].at(name))) << name << ": the same seed, another run";
  }
}

// --activation_checkpointing with tensor parallelism: the split blocks recomputed in backward
// (their collectives run again there) give bitwise the loss and gradients of running them
// directly, attention dropout included (its generator replayed), step after step; the
// collective record shows the recomputed forwards' all-reduces.
TEST(TensorParallelCheckpointingTest, RecomputedBlocksGiveBitwiseTheSameLossAndGradients) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  auto make = [](Net net) { return make_net(net, 0.3); };
  struct Case {
    Net net;
    bool sequence;
    size_t plain_reduces, recomputed_reduces;  // all-reduces a step (0: not counted)
  };
  const auto o = vit_options();
  const size_t blocks = static_cast<size_t>(o.num_layers);
  for (const Case& c : {Case{Net::kViT, false, 4 * blocks, 6 * blocks}, Case{Net::kViT, true, 0, 0},
                        // fc2's all-reduce, once more recomputed (fc1's backward one has no input
                        // gradient to reduce)
                        Case{Net::kMlp, false, 1, 2}}) {
    SCOPED_TRACE(fmt::format("{}{}", c.net == Net::kViT ? "vit" : "mlp",
                             c.sequence ? ", sequence parallel" : ""));
    std::vector<torch::nn::AnyModule> plain{make(c.net), make(c.net)};
    std::vector<torch::nn::AnyModule> recomputed{make(c.net), make(c.net)};
    auto errors = run_ranks(2, [&](int rank, Context& context) {
      auto direct = parallel::tensor::split_model(plain[rank], context, c.sequence);
      auto again = parallel::tensor::split_model(recomputed[rank], context, c.sequence,
                                                 models::parse_activation_checkpointing("blocks"));
      direct.module.ptr()->train();
      again.module.ptr()->train();
      auto reduces = [&] {
        size_t n = 0;
        for (const auto& e : context.trace()->snapshot().entries) n += e.sig.op == "allreduce";
        return n;
      };
      for (int s = 0; s < 2; ++s) {
        size_t before = reduces();
        auto a = cross_entropy(direct.module.forward(b.x[s]), b.y[s]);
        a.backward();
        const size_t direct_reduces = reduces() - before;
        before = reduces();
        auto r = cross_entropy(again.module.forward(b.x[s]), b.y[s]);
        r.backward();
        const size_t again_reduces = reduces() - before;
        if (c.plain_reduces > 0) {
          EXPECT_EQ(direct_reduces, c.plain_reduces) << "step " << s;
          EXPECT_EQ(again_reduces, c.recomputed_reduces) << "step " << s << ": recomputed forwards";
        }
        EXPECT_TRUE(torch::equal(a, r)) << "rank " << rank << " step " << s;
        auto want = direct.module.ptr()->named_parameters();
        for (const auto& p : again.module.ptr()->named_parameters()) {
          EXPECT_TRUE(torch::equal(p.value().grad(), want[p.key()].grad()))
              << "rank " << rank << " step " << s << " grad " << p.key();
        }
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

TEST(TensorParallelClipTest, ClipsByTheWholeModelsNorm) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(Net::kViT, b);
  double want_norm = 0;
  for (const auto& [name, g] : want.first_grads) want_norm += g.pow(2).sum().item<double>();
  want_norm = std::sqrt(want_norm);
  std::vector<torch::nn::AnyModule> nets{make_net(Net::kViT), make_net(Net::kViT)};
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, {});
    plan.forward_backward(test::replica_batch(b, 0, 0, 1), true);
    const double norm = plan.clip_grad_norm(want_norm / 2).item<double>();
    EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm) << "rank " << rank;
    // Every gradient, pieces gathered, is the unsplit one scaled by the same factor.
    const double scale = (want_norm / 2) / (want_norm + 1e-6);
    for (const auto& p : plan.split_module().named_parameters()) {
      torch::Tensor grad = p.value().grad();
      auto spec = plan.specs().find(p.key());
      if (spec != plan.specs().end()) {
        grad = parallel::tensor::gather_whole(grad, spec->second, context);
      }
      expect_close(grad, want.first_grads.at(p.key()) * scale,
                   fmt::format("rank {} clipped {}", rank, p.key()));
    }
  });
  EXPECT_ALL_RANKS_OK(errors);
}

// With the pieces sharded over 2 replicas (ZeRO-1/2/3): the norm over every shard of every piece
// and unsplit layer is the unsplit model's on the global batch, and one clipped step ends where
// the single process's clipped step does.
TEST(TensorParallelClipTest, WithShardedReplicasClipsByTheWholeModelsNorm) {
  const Batches b = test::random_batches(23, kSteps, kGlobalBatch, kClasses);
  auto model = make_net(Net::kViT);
  auto optimizer = test::momentum_sgd(model.ptr()->parameters());
  cross_entropy(model.forward(b.x[0]), b.y[0]).backward();
  const double max_norm = 0.5;
  const double want_norm = torch::nn::utils::clip_grad_norm_(model.ptr()->parameters(), max_norm);
  ASSERT_GT(want_norm, max_norm) << "the test must clip";
  optimizer->step();
  const test::Trained want = test::trained_state(model, *optimizer);
  for (auto mode : {parallel::ShardMode::kOptimizer, parallel::ShardMode::kGradients,
                    parallel::ShardMode::kFull}) {
    SCOPED_TRACE(parallel::name(mode));
    std::vector<torch::nn::AnyModule> nets;
    for (int r = 0; r < 4; ++r) nets.push_back(make_net(Net::kViT));
    auto errors = run_ranks(4, [&](int rank, Context& context) {
      parallel::TensorParallelOptions options;
      options.shard = mode;
      parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
      plan.forward_backward(test::replica_batch(b, 0, plan.replica(), 2), true);
      const double norm = plan.clip_grad_norm(max_norm).item<double>();
      EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm) << "rank " << rank;
      plan.step();
      for (const auto& p : plan.module().ptr()->named_parameters()) {
        expect_close(p.value(), want.params.at(p.key()),
                     fmt::format("rank {} clipped step {}", rank, p.key()));
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// A user's Sequential: the named Linear layers split, the output the unsplit model's.
TEST(TensorParallelizeTest, AUsersSequentialSplitsByNameAndComputesTheSameOutput) {
  auto make = [] {
    torch::manual_seed(4);
    return torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::Tanh(),
                                 torch::nn::Linear(8, 4));
  };
  torch::manual_seed(9);
  const torch::Tensor x = torch::randn({5, 6});
  const torch::Tensor want = make()->forward(x);
  std::vector<torch::nn::Sequential> nets{make(), make()};
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    std::map<std::string, parallel::tensor::ShardSpec> specs;
    auto split = parallel::tensor::parallelize(
        nets[rank],
        {{"0", parallel::tensor::LinearStyle::kColumn}, {"2", parallel::tensor::LinearStyle::kRow}},
        context, &specs);
    expect_close(split->forward(x), want, fmt::format("rank {} output", rank));
    EXPECT_EQ(specs.size(), 3u) << "0.weight, 0.bias, 2.weight";
    EXPECT_EQ(split->named_parameters()["0.weight"].size(0), 4) << "half of the 8 outputs";
    const std::string wrong = [&] {
      try {
        parallel::tensor::parallelize(nets[rank], {{"1", parallel::tensor::LinearStyle::kRow}},
                                      context);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_NE(wrong.find("child '1' of the Sequential is not a Linear"), std::string::npos)
        << wrong;
  });
  EXPECT_ALL_RANKS_OK(errors);
}

// Layouts that cannot run end on every rank with one line, before any collective.
TEST(TensorParallelRefusalTest, LayoutsThatCannotRunAreRefusedOnEveryRankBeforeAnyCollective) {
  auto refused = [](int world, int tensor, std::function<torch::nn::AnyModule()> make,
                    const std::string& expected, bool sequence = false) {
    SCOPED_TRACE(expected);
    std::vector<torch::nn::AnyModule> nets;
    for (int r = 0; r < world; ++r) nets.push_back(make());
    test::expect_refused_before_any_collective(
        world,
        [&](int rank, Context& context) {
          parallel::TensorParallelOptions options;
          options.size = tensor;
          options.sequence_parallel = sequence;
          options.model_name = "the net";
          parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd, options);
        },
        {expected});
  };
  auto vit = [] { return make_net(Net::kViT); };
  refused(3, 2, vit,
          "--tensor_parallel 2: the world of 3 ranks is not a whole number of tensor-parallel "
          "groups");
  refused(3, 3, vit,
          "--tensor_parallel 3: the net's attention heads (4) do not split over 3 ranks");
  auto linear = [] { return torch::nn::AnyModule(torch::nn::Linear(4, 4)); };
  auto mlp = [] { return make_net(Net::kMlp); };
  refused(2, 2, mlp, "--sequence_parallel: the net has no sequence of tokens", true);
  refused(2, 2, linear,
          "the net has no tensor-parallel plan; the models that have one are the ViTs");
}

}  // namespace tensor_parallel_test
}  // namespace ddpx::dist
