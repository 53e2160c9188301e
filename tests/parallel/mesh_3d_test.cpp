// The 3-D mesh (data x pipeline x tensor): the tensor-parallel plan whose pieces run as the stages
// of a pipeline (tensor_parallel_plan.h, TensorParallelOptions::pipeline), against one process
// training the unsplit model on the same global batches. A small ViT (4 heads, 4 blocks) on
// 1 x 2 x 2 and 2 x 2 x 2 meshes (4 and 8 ranks), the MLP on 1 x 3 x 2 (a stage a layer) and
// 1 x 2 x 2 under 1F1B and GPipe, on 2 x 2 x 2 with each stage's pieces sharded over their
// replicas (--shard full, the ViT; optimizer, the MLP), and the ViT sequence parallel (5 tokens:
// shares of 3 and 2 cross the stage boundaries) on 1 x 2 x 2 and, sharded by gradients, on
// 2 x 2 x 2; every rank a real member of a Gloo group on 127.0.0.1. Checked:
// each step's loss and the first step's logits where the plan reports them, the gradients' norm
// and clipping by it, the parameters and momenta after 4 SGD steps (through module() and through
// state_dict(), which loads into the unsplit model), evaluation on the replica's first stage of
// tensor rank 0, what a rank holds while it trains (its stage's pieces only; with --shard full
// nothing whole between steps), a single process's checkpoint loaded into the mesh, sharded or
// not, going on as the single process does, and a world the mesh does not divide refused on every
// rank before any collective.
//
// Tolerance: 1e-5 relative to the largest magnitude of each tensor (plus 1e-6 absolute): the
// split matrix products, the micro-batches' sums and the all-reduces in another order; the
// gradients' norm 2e-5 relative (kNormTolerance).
#include <gtest/gtest.h>
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
#include "parallel/plan_evaluation.h"
#include "parallel/split_reference.h"
#include "parallel/tensor/tensor_parallel_plan.h"

namespace ddpx::dist {
namespace mesh_3d_test {

using test::Batches;
using test::cross_entropy;
using test::error_text;
using test::expect_close;
using test::run_ranks;

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kClasses = 5;
constexpr double kClip = 0.5;  // below the first steps' norms: clipping changes every update
// The ViT's norm grows to 13 by the fourth step and carries the earlier steps' rounding: 9e-6
// relative on 2 x 2 x 2, 1.0e-5 with sharded stages (float64 sums over the shards).
constexpr double kNormTolerance = 2e-5;

enum class Net { kViT, kMlp };

torch::nn::AnyModule make_net(Net net) {
  torch::manual_seed(13);
  if (net == Net::kMlp) {
    models::MlpOptions o;
    o.in_features = 3 * 8 * 8;
    o.hidden = 24;
    o.num_classes = kClasses;
    return torch::nn::AnyModule(models::Mlp(o));
  }
  models::ViTOptions o;
  o.image_size = 8;
  o.patch_size = 4;
  o.num_layers = 4;
  o.num_heads = 4;
  o.hidden_dim = 16;
  o.mlp_dim = 32;
  o.num_classes = kClasses;
  models::VisionTransformer vit(o);
  torch::NoGradGuard no_grad;  // torchvision zeroes the head: the blocks would get no gradient
  for (auto& p : vit->heads->parameters()) p.normal_(0, 0.2);
  return torch::nn::AnyModule(vit);
}

// One process, with every step's clipped norm and the checkpoint after 2 steps.
struct Reference : test::SingleProcess {
  std::vector<double> norms;
  std::vector<std::string> at_2;  // the checkpoint after 2 steps: archive_bytes()
};

Reference single_process(Net net, const Batches& b) {
  Reference r;
  static_cast<test::SingleProcess&>(r) = test::train_single_process(
      make_net(net), b, kSteps,
      [&r](int s, torch::nn::AnyModule& model, torch::optim::Optimizer& optimizer) {
        if (s != 2) return;
        torch::serialize::OutputArchive m, o;
        model.ptr()->save(m);
        optimizer.save(o);
        r.at_2 = test::archive_bytes(m, o);
      },
      [&r](int, torch::nn::AnyModule& model) {
        r.norms.push_back(torch::nn::utils::clip_grad_norm_(model.ptr()->parameters(), kClip));
      });
  return r;
}

struct Layout {
  Net net;
  int world, stages, tensor;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  bool sequence_parallel = false;
};

std::string layout_name(const Layout& l) {
  return fmt::format(
      "{}_{}x{}x{}_{}{}{}", l.net == Net::kViT ? "vit" : "mlp", l.world / (l.stages * l.tensor),
      l.stages, l.tensor, l.schedule == parallel::PipelineSchedule::k1F1B ? "1f1b" : "gpipe",
      l.shard == parallel::ShardMode::kNone ? "" : std::string("_shard_") + parallel::name(l.shard),
      l.sequence_parallel ? "_sp" : "");
}

parallel::TensorParallelOptions mesh_options(const Layout& l) {
  parallel::TensorParallelOptions options;
  options.size = l.tensor;
  options.shard = l.shard;
  options.sequence_parallel = l.sequence_parallel;
  parallel::PipelineOptions pipeline;
  pipeline.stages = l.stages;
  pipeline.microbatches = l.stages;
  pipeline.schedule = l.schedule;
  options.pipeline = pipeline;
  return options;
}

class Mesh3dTest : public ::testing::TestWithParam<Layout> {};

TEST_P(Mesh3dTest, TrainsAsTheSingleProcessAndSavesTheUnsplitModel) {
  const Layout layout = GetParam();
  const Batches b = test::random_batches(29, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(layout.net, b);
  std::vector<torch::nn::AnyModule> nets;
  for (int r = 0; r < layout.world; ++r) nets.push_back(make_net(layout.net));
  std::vector<std::string> saved(2);
  const int replicas = layout.world / (layout.stages * layout.tensor);
  auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
    parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd,
                                      mesh_options(layout));
    ASSERT_NE(plan.pipeline(), nullptr);
    // Stage s of replica d on ranks (d * P + s) * T + t.
    const int replica = rank / (layout.stages * layout.tensor);
    const int stage = rank / layout.tensor % layout.stages;
    ASSERT_EQ(plan.replica(), replica);
    ASSERT_EQ(plan.tensor_rank(), rank % layout.tensor);
    ASSERT_EQ(plan.pipeline()->pipeline_rank(), stage);
    ASSERT_EQ(plan.pipeline()->units().empty(), layout.shard == parallel::ShardMode::kNone);
    const bool reports = stage == 0;  // each tensor rank of the replica's first stage
    for (int s = 0; s < kSteps; ++s) {
      parallel::MicroBatch mb = test::replica_batch(b, s, replica, replicas);
      mb.learning_rate = 0.05;
      auto out = plan.forward_backward(mb, true);
      ASSERT_EQ(out.loss.defined(), reports) << "rank " << rank << " step " << s;
      if (reports && s == 0) {
        const int64_t n = kGlobalBatch / replicas;
        // The predictions: the last stage's argmax, sent to the first stage (not the logits).
        EXPECT_TRUE(
            torch::equal(out.output, want.first_logits.narrow(0, replica * n, n).argmax(-1)))
            << "rank " << rank << " first predictions";
      }
      if (reports && replicas == 1) {
        EXPECT_NEAR(out.loss.item<double>(), want.losses[s], 1e-5 * want.losses[s])
            << "rank " << rank << " step " << s;
      }
      const double norm = plan.clip_grad_norm(kClip).item<double>();
      EXPECT_NEAR(norm, want.norms[s], kNormTolerance * want.norms[s])
          << "rank " << rank << " step " << s;
      plan.step();
      plan.zero_grad();
    }
    // The pipeline's bubble line, its ranks named as the job's (tensor rank 0's on rank 0).
    const std::string summary = plan.epoch_summary();
    EXPECT_NE(summary.find("pipeline bubble"), std::string::npos) << summary;
    if (rank == 0) {
      EXPECT_NE(summary.find(fmt::format("| {} ", layout.tensor)), std::string::npos) << summary;
    }
    // While it trains, a rank holds its stage's pieces (sharded: whole for optimizer, none for
    // full) and nothing of the other stages or of the whole model's split layers.
    std::set<const void*> storages;
    size_t held = 0, mine = 0;
    auto whole = nets[rank].ptr()->parameters(), split = plan.split_module().parameters();
    for (const auto* list : {&whole, &split}) {
      for (const auto& p : *list) {
        if (storages.insert(p.storage().unsafeGetStorageImpl()).second)
          held += p.storage().nbytes();
      }
    }
    if (layout.shard == parallel::ShardMode::kNone) {
      for (const auto& p : plan.parameters()) mine += p.nbytes();
    } else if (layout.shard != parallel::ShardMode::kFull) {
      for (const auto& unit : plan.pipeline()->units()) mine += unit.held_bytes();
    }
    EXPECT_EQ(held, mine) << "rank " << rank << " holds more than its stage's pieces";
    test::expect_replica_evaluation(
        plan, rank, layout.world, replica, replicas, reports && plan.tensor_rank() == 0, b.x[0],
        [&](const torch::Tensor& logits) {
          expect_close(logits, want.eval_logits, fmt::format("rank {} evaluation logits", rank));
        });
    test::expect_trained_and_keep_state(plan, rank, want.trained, saved);
  });
  EXPECT_ALL_RANKS_OK(errors);
  ASSERT_FALSE(saved[0].empty());

  // The checkpoint is the unsplit model's and optimizer's.
  test::expect_checkpoint_holds(saved, make_net(layout.net), want.trained);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Mesh3dTest,
    ::testing::Values(Layout{Net::kViT, 4, 2, 2}, Layout{Net::kViT, 8, 2, 2},
                      Layout{Net::kMlp, 6, 3, 2},
                      Layout{Net::kMlp, 4, 2, 2, parallel::PipelineSchedule::kGpipe},
                      Layout{Net::kViT, 8, 2, 2, parallel::PipelineSchedule::k1F1B,
                             parallel::ShardMode::kFull},
                      Layout{Net::kMlp, 8, 2, 2, parallel::PipelineSchedule::kGpipe,
                             parallel::ShardMode::kOptimizer},
                      Layout{Net::kViT, 4, 2, 2, parallel::PipelineSchedule::k1F1B,
                             parallel::ShardMode::kNone, true},
                      Layout{Net::kViT, 8, 2, 2, parallel::PipelineSchedule::kGpipe,
                             parallel::ShardMode::kGradients, true}),
    [](const auto& info) { return layout_name(info.param); });

// The single process's checkpoint after 2 steps, loaded into a 1 x 2 x 2 mesh and into a
// 2 x 2 x 2 one whose replicas shard their stages (--shard full): the next 2 steps end where the
// single process's 4 do.
TEST(Mesh3dCheckpointTest, AWholeCheckpointLoadsAndTrainingGoesOnAsTheSingleProcess) {
  const Batches b = test::random_batches(29, kSteps, kGlobalBatch, kClasses);
  const Reference want = single_process(Net::kViT, b);
  for (const Layout& layout :
       {Layout{Net::kViT, 4, 2, 2}, Layout{Net::kViT, 8, 2, 2, parallel::PipelineSchedule::k1F1B,
                                           parallel::ShardMode::kFull}}) {
    SCOPED_TRACE(layout_name(layout));
    const int replicas = layout.world / (layout.stages * layout.tensor);
    std::vector<torch::nn::AnyModule> nets;
    for (int r = 0; r < layout.world; ++r) nets.push_back(make_net(layout.net));
    auto errors = run_ranks(layout.world, [&](int rank, Context& context) {
      parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd,
                                        mesh_options(layout));
      torch::serialize::InputArchive m, o;
      std::istringstream ms(want.at_2[0]), os(want.at_2[1]);
      m.load_from(ms);
      o.load_from(os);
      plan.load_state_dict(m, o);
      for (int s = 2; s < kSteps; ++s) {
        parallel::MicroBatch mb = test::replica_batch(b, s, plan.replica(), replicas);
        mb.learning_rate = 0.05;
        plan.forward_backward(mb, true);
        plan.clip_grad_norm(kClip);
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

TEST(Mesh3dRefusalTest, AWorldTheMeshDoesNotDivideIsRefusedOnEveryRankBeforeAnyCollective) {
  const Layout layout{Net::kViT, 6, 2, 2};
  std::vector<torch::nn::AnyModule> nets;
  for (int r = 0; r < layout.world; ++r) nets.push_back(make_net(layout.net));
  test::expect_refused_before_any_collective(
      layout.world,
      [&](int rank, Context& context) {
        parallel::TensorParallelPlan plan(nets[rank], context, test::momentum_sgd,
                                          mesh_options(layout));
      },
      {"--pipeline_parallel 2 x --tensor_parallel 2", "multiple of 4 ranks"});
}

}  // namespace mesh_3d_test
}  // namespace ddpx::dist
