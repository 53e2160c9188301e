// `ddpx plan`'s meshes (parallel/planner/mesh_plan.h, split_probe.h): a pipeline stage holds its
// layers' parameters (only them, from the start) and the micro-batches its schedule keeps in
// flight, the worst stage's rank sets the peak, sharded replicas add their shards and save
// optimizer state; a tensor rank holds its pieces, the whole model at start, and its gradients only
// in backward unless replicas keep them in DDP's buckets; impossible layouts are refused naming the
// flag; and the probes measure real layers and a real split model on thread ranks. (Predictions
// against `bench memory` on real ranks: tests/e2e/plan_test.cpp.)
#include "parallel/planner/mesh_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/mlp.h"
#include "models/zoo/registry.h"

namespace ddpx::parallel {
namespace {

// Four equal layers: 100 parameters, 10 bytes a sample held, 1 byte a sample of input.
std::vector<LayerMemory> four_layers() {
  std::vector<LayerMemory> layers(4);
  for (size_t l = 0; l < layers.size(); ++l) {
    layers[l].name = "layer" + std::to_string(l);
    layers[l].parameters = 100;
    layers[l].seconds = 1;
    layers[l].held.per_sample = 10;
    layers[l].input.per_sample = l == 0 ? 0 : 1;
  }
  return layers;
}

ModelMemory whole_of(int64_t parameters) {
  ModelMemory m;
  m.parameters = parameters;
  return m;
}

TEST(MeshPlanTest, APipelineStageHoldsItsLayersAndTheMicroBatchesItsScheduleKeeps) {
  PlanRequest r;
  r.world_size = 2;
  r.batch_size = 2;  // the replica of 2 stages takes 4
  r.optimizer_bytes_per_param = 4;
  PipelineRequest q;
  q.stages = 2;
  q.microbatches = 4;  // micro-batches of 1
  q.balance = PipelineBalance::kParams;
  const auto p = predict_pipeline(whole_of(400), four_layers(), r, q);
  EXPECT_EQ(p.pipeline, 2);
  EXPECT_EQ(p.data, 1);
  EXPECT_EQ(p.batch, 4);
  EXPECT_DOUBLE_EQ(p.params, 4 * 200.0) << "two layers a stage";
  EXPECT_DOUBLE_EQ(p.grads, 4 * 200.0);
  EXPECT_DOUBLE_EQ(p.optimizer, 4 * 200.0);
  EXPECT_DOUBLE_EQ(p.transient, 0) << "one replica: no DDP buckets to rebuild";
  // 1F1B: stage 0 keeps 2 micro-batches (P - 0) of 20 bytes; stage 1 one of 20 + its input.
  EXPECT_EQ(p.worst_stage, 0);
  EXPECT_DOUBLE_EQ(p.activations, 2 * 20.0);
  EXPECT_DOUBLE_EQ(p.start, 4 * 200.0) << "only its stage reaches the GPU";
  EXPECT_EQ(p.flags,
            "--pipeline_parallel 2 --microbatches 4 --batch_size 4 --pipeline_balance params");

  q.schedule = PipelineSchedule::kGpipe;  // every micro-batch kept: stage 1's input tips it
  const auto gpipe = predict_pipeline(whole_of(400), four_layers(), r, q);
  EXPECT_EQ(gpipe.worst_stage, 1);
  EXPECT_DOUBLE_EQ(gpipe.activations, 4 * 21.0);

  r.world_size = 4;  // two replicas: their DDP rebuilds its buckets once
  q.schedule = PipelineSchedule::k1F1B;
  const auto two = predict_pipeline(whole_of(400), four_layers(), r, q);
  EXPECT_EQ(two.data, 2);
  EXPECT_DOUBLE_EQ(two.transient, 4 * 200.0);
  EXPECT_TRUE(two.grads_persist);
}

// With --shard the replicas of a stage shard it (pipeline_plan.h): through a step a rank keeps
// its stage whole and its gradients whole, beside its shards of both and its share of the
// optimizer state; the reduce-scatter's input is the stage's gradients once more. Every ZeRO
// stage peaks alike (the stage is gathered once a step).
TEST(MeshPlanTest, ShardedPipelineReplicasHoldTheirStageWholeBesideTheirShards) {
  PlanRequest r;
  r.world_size = 8;  // 2 stages x 4 replicas
  r.batch_size = 2;
  r.optimizer_bytes_per_param = 8;  // AdamW
  PipelineRequest q;
  q.stages = 2;
  q.microbatches = 4;
  q.balance = PipelineBalance::kParams;
  const auto plain = predict_pipeline(whole_of(400), four_layers(), r, q);
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    SCOPED_TRACE(name(mode));
    const auto z = predict_pipeline(whole_of(400), four_layers(), r, q, mode);
    EXPECT_EQ(z.shard, mode);
    EXPECT_EQ(z.data, 4);
    EXPECT_DOUBLE_EQ(z.params, 4 * 200.0 + 4 * 200.0 / 4) << "the stage whole and a shard";
    EXPECT_DOUBLE_EQ(z.grads, 4 * 200.0 + 4 * 200.0 / 4);
    EXPECT_DOUBLE_EQ(z.optimizer, 8 * 200.0 / 4);
    EXPECT_DOUBLE_EQ(z.transient, 4 * 200.0) << "the reduce-scatter's input";
    EXPECT_DOUBLE_EQ(z.activations, plain.activations);
    // (K (D - 1) - 8) Psi_r / D less than the unsharded stage: 4 x 200 bytes here.
    EXPECT_DOUBLE_EQ(plain.peak() - z.peak(), 4 * 200.0);
    EXPECT_EQ(z.flags, plain.flags + " --shard " + name(mode));
  }
  r.world_size = 2;  // one replica: nothing to shard over
  try {
    predict_pipeline(whole_of(400), four_layers(), r, q, ShardMode::kFull);
    ADD_FAILURE() << "--shard full on one replica was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("leaves one replica: --shard full"), std::string::npos)
        << e.what();
  }
}

TEST(MeshPlanTest, PipelineLayoutsThatCannotRunAreRefusedNamingTheFlag) {
  PlanRequest r;
  r.world_size = 3;
  r.batch_size = 2;
  PipelineRequest q;
  auto refused = [&](const std::string& flag) {
    try {
      predict_pipeline(whole_of(400), four_layers(), r, q);
      ADD_FAILURE() << "not refused: " << flag;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  q.stages = 2;
  refused("--pipeline_parallel 2");  // does not divide 3 GPUs
  r.world_size = 8;
  q.stages = 8;
  refused("pipeline_parallel");  // 4 layers, 8 stages
  q.stages = 2;
  q.microbatches = 3;
  refused("--microbatches 3");  // a replica's batch of 4
  q.microbatches = 4;
  q.batch_norm = true;
  refused("BatchNorm");  // micro-batches of one sample
  q.batch_norm = false;
  q.microbatches = 1;
  refused("1f1b");  // fewer micro-batches than stages
  q.schedule = PipelineSchedule::kInterleaved;
  r.batch_size = 3;
  q.microbatches = 3;
  refused("interleaved");  // micro-batches not a multiple of the ranks
  r.batch_size = 2;
  q.microbatches = 4;
  q.stages_per_rank = 4;
  refused("pipeline_parallel");  // 4 layers, 2 x 4 stages
}

// Interleaved, the model is cut into V x P stages and rank s holds stages s and s + P: its
// parameters are both stages', and its activations the bytes of each stage's micro-batches the
// schedule keeps in flight at once, each at its stage's size.
TEST(MeshPlanTest, AnInterleavedRankHoldsItsStagesAndTheirMicroBatchesInFlight) {
  PlanRequest r;
  r.world_size = 2;
  r.batch_size = 2;  // a replica's batch of 4: 4 micro-batches of 1
  PipelineRequest q;
  q.schedule = PipelineSchedule::kInterleaved;
  q.stages_per_rank = 2;
  q.microbatches = 4;
  q.balance = PipelineBalance::kParams;
  const auto p = predict_pipeline(whole_of(400), four_layers(), r, q);
  EXPECT_DOUBLE_EQ(p.params, 4 * 200.0) << "two of the four layers";
  // Rank 0 runs layers 0 and 2 (10 bytes a sample held; layer 2 also keeps its 1-byte input),
  // rank 1 layers 1 and 3 (11 each).
  const PipelineShape shape{2, 4, 2};
  const auto run =
      simulate_schedule(PipelineSchedule::kInterleaved, shape, 1.0, 2.0, {{10, 11}, {11, 11}});
  EXPECT_DOUBLE_EQ(p.activations, run.max_bytes[static_cast<size_t>(p.worst_stage)]);
  const int held = simulate_schedule(PipelineSchedule::kInterleaved, shape)
                       .max_activations[static_cast<size_t>(p.worst_stage)];
  EXPECT_GE(p.activations, 10.0 * held) << "each held micro-batch at 10 bytes or more";
  EXPECT_LE(p.activations, 11.0 * held);
  EXPECT_LT(held, 2 * 4) << "fewer than all of both stages' micro-batches";
  EXPECT_EQ(p.flags,
            "--pipeline_parallel 2 --microbatches 4 --pipeline_schedule interleaved "
            "--stages_per_rank 2 --batch_size 4 --pipeline_balance params");
}

TEST(MeshPlanTest, ATensorRankHoldsItsPiecesAndItsGradientsOnlyInBackwardWithoutReplicas) {
  TensorMemory m;
  m.ranks = 2;
  m.parameters = 600;  // 400 split over 2, 400 whole
  m.split_parameters = 400;
  m.activations.per_sample = 100;
  PlanRequest r;
  r.world_size = 2;
  r.batch_size = 3;
  r.optimizer_bytes_per_param = 8;
  const auto p = predict_tensor(whole_of(800), m, r);
  EXPECT_EQ(p.batch, 6);
  EXPECT_DOUBLE_EQ(p.params, 4 * 600.0);
  EXPECT_DOUBLE_EQ(p.optimizer, 8 * 600.0);
  EXPECT_DOUBLE_EQ(p.activations, 600);
  EXPECT_DOUBLE_EQ(p.start, 4 * (800 + 200.0)) << "the whole model and this rank's pieces";
  EXPECT_FALSE(p.grads_persist);
  EXPECT_DOUBLE_EQ(p.peak(), 4 * 600.0 + 8 * 600.0 + std::max(4 * 600.0, 600.0));
  EXPECT_EQ(p.flags, "--tensor_parallel 2 --batch_size 6");

  r.world_size = 4;
  const auto two = predict_tensor(whole_of(800), m, r);
  EXPECT_TRUE(two.grads_persist) << "DDP's buckets keep the replicas' gradients";
  EXPECT_DOUBLE_EQ(two.peak(), 4 * 600.0 + 8 * 600.0 + 4 * 600.0 + std::max(4 * 600.0, 600.0));
}

TEST(MeshPlanTest, TwoTensorProbesCarryToTheSizesBetween) {
  TensorMemory two;
  two.ranks = 2;
  two.whole_parameters = 1000;
  two.split_parameters = 800;
  two.parameters = 200 + 400;  // the unsplit 200 and half the split 800
  two.activations = {50, 3000};
  TensorMemory eight = two;
  eight.ranks = 8;
  eight.parameters = 200 + 100;
  eight.activations = {20, 1500};
  // A(T) = U + S/T: per sample S = 4000, U = 1000; fixed S = 80, U = 10.
  const auto four = at_tensor_size(two, eight, 4);
  EXPECT_EQ(four.ranks, 4);
  EXPECT_EQ(four.parameters, 200 + 200);
  EXPECT_DOUBLE_EQ(four.activations.per_sample, 1000 + 4000 / 4.0);
  EXPECT_DOUBLE_EQ(four.activations.fixed, 10 + 80 / 4.0);
  EXPECT_DOUBLE_EQ(at_tensor_size(two, eight, 8).activations.per_sample, 1500)
      << "a probed size is its probe";
  EXPECT_DOUBLE_EQ(at_tensor_size(two, two, 2).activations.per_sample, 3000);
}

// Tensor parallelism whose replicas shard the pieces: the states are the ZeRO stage's over the
// rank's own units at world D = N/T (memory_plan.h's arithmetic), the activations the split
// model's; one replica has nothing to shard over. Probed units carry to other T along the dim
// their tensor ranks split.
TEST(MeshPlanTest, ShardedTensorReplicasHoldTheirZeroStagesShareOfThePieces) {
  TensorMemory m;
  m.ranks = 2;
  m.parameters = 600;
  m.split_parameters = 400;
  m.activations.per_sample = 100;
  // Two units: a block of two pieces (rows split; within a row split) and a whole root layer.
  UnitParams block{"block", false, {{100, 1, 0}, {10, 10, 1}}};  // 100 + 100 elements
  UnitParams root{"root", true, {{40, 10, -1}}};                 // 400 elements
  m.units = {block, root};
  PlanRequest r;
  r.world_size = 8;  // 4 replicas of 2 tensor ranks
  r.batch_size = 3;
  r.optimizer_bytes_per_param = 8;
  const auto full = predict_tensor(whole_of(800), m, r, ShardMode::kFull);
  EXPECT_EQ(full.data, 4);
  EXPECT_EQ(full.shard, ShardMode::kFull);
  // Shards over 4: ceil(100/4) x 1 + ceil(10/4) x 10 + ceil(40/4) x 10 = 25 + 30 + 100 elements.
  EXPECT_DOUBLE_EQ(full.params, 4 * 155.0);
  EXPECT_DOUBLE_EQ(full.grads, 4 * 155.0);
  EXPECT_DOUBLE_EQ(full.optimizer, 8 * 155.0);
  EXPECT_GE(full.activations, 600) << "the split model's, and a unit's gradients in backward";
  EXPECT_DOUBLE_EQ(full.start, 4 * (800 + 200.0));
  EXPECT_EQ(full.flags, "--tensor_parallel 2 --shard full --batch_size 6");
  const auto none = predict_tensor(whole_of(800), m, r);
  EXPECT_LT(full.params + full.grads + full.optimizer,
            (none.params + none.grads + none.optimizer) / 3)
      << "ZeRO-3 over 4 replicas";

  r.world_size = 2;
  EXPECT_THROW(predict_tensor(whole_of(800), m, r, ShardMode::kOptimizer), Error)
      << "one replica: nothing to shard over";

  const auto carried = at_tensor_size(m, m, 2);
  EXPECT_EQ(carried.units[0].params[0].rows, 100);
  TensorMemory eight = m;
  eight.ranks = 8;
  const auto at4 = at_tensor_size(m, eight, 4);
  EXPECT_EQ(at4.units[0].params[0].rows, 50) << "rows split: halved from T = 2 to 4";
  EXPECT_EQ(at4.units[0].params[1].row_numel, 5) << "split within a row";
  EXPECT_EQ(at4.units[1].params[0].rows, 40) << "a whole layer stays whole";
}

// The 3-D mesh: the pipeline's arithmetic over the split model's layers (a rank's pieces), cut by
// parameters as ddpx train cuts a pipeline of tensor-parallel stages, on N/(P T) replicas; it
// starts as tensor parallelism does, with the whole model and the rank's pieces.
TEST(MeshPlanTest, APipelineOfTensorParallelStagesHoldsItsStagesPiecesOnTheReplicasLeft) {
  TensorMemory m;
  m.ranks = 2;
  m.whole_parameters = 600;
  m.split_parameters = 400;
  m.parameters = 400;  // 200 whole, 200 pieces: four layers of 100 a rank
  m.layers = four_layers();
  for (auto& layer : m.layers) layer.seconds = 0;  // not timed: cut by parameters
  PlanRequest r;
  r.world_size = 8;  // 2 replicas of 2 stages of 2 tensor ranks
  r.batch_size = 2;  // the replica of 4 GPUs takes 8
  r.optimizer_bytes_per_param = 4;
  PipelineRequest q;
  q.stages = 2;
  q.microbatches = 4;  // micro-batches of 2
  const auto p = predict_pipeline_tensor(whole_of(600), m, r, q);
  EXPECT_EQ(p.data, 2);
  EXPECT_EQ(p.pipeline, 2);
  EXPECT_EQ(p.tensor, 2);
  EXPECT_EQ(p.batch, 8);
  EXPECT_DOUBLE_EQ(p.params, 4 * 200.0) << "two layers a stage, by parameters";
  EXPECT_DOUBLE_EQ(p.transient, 4 * 200.0) << "two replicas: DDP rebuilds the stage's buckets";
  // 1F1B: stage 0 keeps 2 micro-batches (P - 0) of 2 samples x 20 bytes.
  EXPECT_EQ(p.worst_stage, 0);
  EXPECT_DOUBLE_EQ(p.activations, 2 * 2 * 20.0);
  EXPECT_DOUBLE_EQ(p.start, 4 * (600 + 200.0)) << "the whole model and the rank's pieces";
  EXPECT_EQ(p.flags, "--pipeline_parallel 2 --tensor_parallel 2 --microbatches 4 --batch_size 8");
  ModelMemory with_images = whole_of(600);
  with_images.sample_bytes = 5;  // every rank of the replica receives its batch of 8
  EXPECT_DOUBLE_EQ(predict_pipeline_tensor(with_images, m, r, q).activations, p.activations + 40);

  const auto full = predict_pipeline_tensor(whole_of(600), m, r, q, ShardMode::kFull);
  EXPECT_DOUBLE_EQ(full.optimizer, 4 * 200.0 / 2) << "the stage's optimizer state over 2 replicas";
  EXPECT_EQ(full.flags,
            "--pipeline_parallel 2 --tensor_parallel 2 --microbatches 4 --batch_size 8 "
            "--shard full");
  m.sequence_parallel = true;
  EXPECT_EQ(predict_pipeline_tensor(whole_of(600), m, r, q).flags,
            "--pipeline_parallel 2 --tensor_parallel 2 --sequence_parallel --microbatches 4 "
            "--batch_size 8");

  r.world_size = 6;
  try {
    predict_pipeline_tensor(whole_of(600), m, r, q);
    ADD_FAILURE() << "2 x 2 does not divide 6 GPUs";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--pipeline_parallel 2 x --tensor_parallel 2 does not "
                                         "divide 6 GPUs"),
              std::string::npos)
        << e.what();
  }
  r.world_size = 4;
  EXPECT_THROW(predict_pipeline_tensor(whole_of(600), m, r, q, ShardMode::kFull), Error)
      << "one replica: nothing to shard over";
}

// The split layers carry to other T as the whole split model does: U + S/T through two probes.
TEST(MeshPlanTest, SplitLayersCarryToOtherTensorSizes) {
  TensorMemory two;
  two.ranks = 2;
  two.whole_parameters = 1000;
  two.split_parameters = 800;
  two.parameters = 600;
  two.layers = four_layers();  // 100 parameters and 10 bytes a sample a layer at T = 2
  TensorMemory eight = two;
  eight.ranks = 8;
  eight.parameters = 300;
  for (auto& layer : eight.layers) {
    layer.parameters = 25;      // 100 at T = 2: U = 0, S = 200
    layer.held.per_sample = 4;  // U = 2, S = 16
  }
  const auto four = at_tensor_size(two, eight, 4);
  ASSERT_EQ(four.layers.size(), 4u);
  EXPECT_EQ(four.layers[1].parameters, 50);
  EXPECT_DOUBLE_EQ(four.layers[1].held.per_sample, 2 + 16 / 4.0);
  EXPECT_DOUBLE_EQ(four.layers[1].input.per_sample, 1) << "the same at both: carried as is";
  TensorMemory without = eight;
  without.layers.clear();
  EXPECT_TRUE(at_tensor_size(two, without, 4).layers.empty()) << "nothing to carry from";
  EXPECT_EQ(at_tensor_size(two, without, 2).layers.size(), 4u) << "a probed size is its probe";
}

TEST(SplitProbeTest, LayersOfAZooModelAddUpToItAndHoldMoreForMoreSamples) {
  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 32;
  torch::manual_seed(0);
  auto model = models::create_model("resnet20", config);
  ProbeOptions o;
  o.image_size = 32;
  o.num_classes = 10;
  const auto layers = measure_layers(model, o);
  ASSERT_TRUE(layers.has_value());
  ASSERT_GE(layers->size(), 3u);
  int64_t sum = 0;
  for (const auto& l : *layers) sum += l.parameters;
  int64_t whole = 0;
  for (const auto& p : model.ptr()->parameters()) whole += p.numel();
  EXPECT_EQ(sum, whole) << "every parameter in one layer";
  // The stem's output (16 x 32 x 32 floats a sample) is kept for its backward and the next layer.
  EXPECT_GE(layers->front().held.per_sample, 16 * 32 * 32 * 4.0);
  EXPECT_DOUBLE_EQ(layers->front().input.at(8), 0) << "the first stage's input is the batch";
  EXPECT_DOUBLE_EQ((*layers)[1].input.per_sample, 16 * 32 * 32 * 4.0);

  // Recomputed layers keep only their input.
  const auto recomputed =
      measure_layers(model, o, models::parse_activation_checkpointing("blocks"));
  ASSERT_TRUE(recomputed.has_value());
  EXPECT_TRUE((*recomputed)[1].recomputed);
  EXPECT_LT((*recomputed)[1].held.per_sample, (*layers)[1].held.per_sample);

  auto plain = torch::nn::AnyModule(torch::nn::Linear(4, 4));
  EXPECT_FALSE(measure_layers(plain, o).has_value()) << "not sequential-shaped";
}

TEST(SplitProbeTest, TensorParallelRanksOnThreadsHoldTheirPiecesAndRefuseModelsWithoutAPlan) {
  models::MlpOptions options;
  options.in_features = 3 * 8 * 8;
  options.hidden = 64;
  options.num_classes = 10;
  auto build = [&] { return torch::nn::AnyModule(models::Mlp(options)); };
  ProbeOptions o;
  o.image_size = 8;
  o.num_classes = 10;
  // Batches of 256 and 512: at 32 and 64 the peak of so small a model is a weight gradient's
  // temporary in backward, beside which whether the row-parallel all-reduce's buffer is still
  // alive (Gloo's worker frees it when it likes) moved the fit to 0 a sample under load; at 256
  // the activations hold the peak (measured over 120 runs beside two others: 248 to 512 B a
  // sample).
  o.batch_small = 256;
  const auto m = measure_tensor_parallel(build, 2, false, o, "mlp");
  // fc1 (192 -> 64) column-parallel, fc2 (64 -> 32) row-parallel (its bias whole), fc3 whole.
  const int64_t fc1 = 192 * 64 + 64, fc2_weight = 64 * 32, fc3 = 32 * 10 + 10;
  EXPECT_EQ(m.split_parameters, fc1 + fc2_weight);
  EXPECT_EQ(m.parameters, fc1 / 2 + fc2_weight / 2 + 32 + fc3);
  EXPECT_GT(m.activations.per_sample, 0);
  EXPECT_TRUE(m.layers.empty()) << "the layers only when asked";

  // The split layers, each alone on the thread ranks, as a pipeline of them runs them.
  const auto layered = measure_tensor_parallel(build, 2, false, o, "mlp", {}, /*layers=*/true);
  ASSERT_EQ(layered.layers.size(), 3u);
  EXPECT_EQ(layered.layers[0].parameters, fc1 / 2);
  EXPECT_EQ(layered.layers[1].parameters, fc2_weight / 2 + 32);
  EXPECT_EQ(layered.layers[2].parameters, fc3);
  // fc1's output is a rank's half of the hidden width (32 floats a sample); fc2's all-reduced
  // output is whole (32), and so is the input fc3 receives.
  EXPECT_GE(layered.layers[0].held.per_sample, 32 * 4.0);
  EXPECT_DOUBLE_EQ(layered.layers[1].input.per_sample, 32 * 4.0);
  EXPECT_DOUBLE_EQ(layered.layers[2].input.per_sample, 32 * 4.0);

  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 32;
  try {
    measure_tensor_parallel([&] { return models::create_model("resnet20", config); }, 2, false, o,
                            "resnet20");
    ADD_FAILURE() << "resnet20 has no tensor-parallel plan";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--tensor_parallel 2"), std::string::npos) << e.what();
  }
}

// `ddpx plan` probes a size with and without sequence parallelism on one set of thread ranks,
// each rank's whole model built once and split once a mode (rank 0's the model the plan built
// already): each mode measures what its own probe measures. The tiny ViT (3 heads) on 3 ranks,
// at batches where the activations, not Gloo's buffers, hold the peak.
TEST(SplitProbeTest, BothSequenceModesOnOneSetOfThreadRanksMeasureAsTheirOwnProbes) {
  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 32;
  int built = 0;
  auto build = [&] {
    ++built;
    return models::create_model("vit_tiny_patch4_32", config);
  };
  ProbeOptions o;
  o.image_size = 32;
  o.num_classes = 10;
  o.batch_small = 16;
  const auto both = measure_tensor_parallel(build, 3, {false, true}, o, "vit_tiny_patch4_32", {},
                                            /*layers=*/true, build());
  EXPECT_EQ(built, 3) << "the given model and one more a rank";
  ASSERT_EQ(both.size(), 2u);
  for (bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "sequence parallel" : "plain");
    const TensorMemory alone =
        measure_tensor_parallel(build, 3, sequence, o, "vit_tiny_patch4_32", {}, true);
    const TensorMemory& m = both[sequence];
    EXPECT_EQ(m.sequence_parallel, sequence);
    EXPECT_EQ(m.whole_parameters, alone.whole_parameters);
    EXPECT_EQ(m.split_parameters, alone.split_parameters);
    EXPECT_EQ(m.parameters, alone.parameters);
    EXPECT_EQ(m.units.size(), alone.units.size());
    EXPECT_NEAR(m.activations.at(32) / alone.activations.at(32), 1.0, 0.05)
        << m.activations.at(32) << " bytes at batch 32 beside the other mode, "
        << alone.activations.at(32) << " alone";
    ASSERT_EQ(m.layers.size(), alone.layers.size());
    for (size_t l = 0; l < m.layers.size(); ++l) {
      EXPECT_EQ(m.layers[l].parameters, alone.layers[l].parameters) << m.layers[l].name;
      EXPECT_NEAR(m.layers[l].input.at(32), alone.layers[l].input.at(32), 1.0) << m.layers[l].name;
    }
  }
  // Each rank keeps only its tokens between the split layers: less than without.
  EXPECT_LT(both[true].activations.at(32), both[false].activations.at(32));
}

}  // namespace
}  // namespace ddpx::parallel
