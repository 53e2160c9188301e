// `ddpx plan` as a user runs it: its predicted per-rank peak for DDP and each ZeRO stage agrees
// within 10% with what `ddpx run 2 -- bench memory --shard S` then measures on real ranks (the
// most CPU tensor bytes alive at once on any rank, the figure a GPU's max_memory_allocated
// gives), for ResNet-50 and the tiny ViT at small batches, and for gpt-nano and bert-nano
// (probed as one- and two-block copies); it recommends a flag that fits (gpt2-xl on 8 GPUs too);
// a bad size is one line naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

// The value of `"key": N` in each JSON line, by the line's "shard".
std::map<std::string, std::vector<double>> by_shard(const std::string& text,
                                                    const std::string& key) {
  std::map<std::string, std::vector<double>> out;
  std::regex line("\\{[^\\n]*\"shard\": \"([a-z]+)\"[^\\n]*\\}");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator();
       ++it) {
    const std::string row = (*it)[0];
    std::smatch m;
    if (std::regex_search(row, m, std::regex("\"" + key + "\": ([0-9.e+]+)")))
      out[(*it)[1]].push_back(std::stod(m[1]));
  }
  return out;
}

struct Case {
  const char* model;
  const char* flags;
  std::vector<const char*> shards;
};

// On two ranks, in the layout a GPU has: DDP over Gloo (with the shared-memory transport its
// gradient buckets live in segments that are not CPU tensors), ZeRO-1/2 with
// DDPX_GATHER_IN_PLACE=0 (else they keep their shards as the rows of parameters in shared
// memory, Psi/N less than a GPU holds). The ViT at batch 2, its states (12 Psi under DDP) about
// 80% of the peak: vit_tiny_patch4_32 (predicted 0% and -5% off) stands for ViT-B/16 (0% and
// -4%), whose plan and two benches took four times as long.
TEST(PlanCliTest, PredictedPeaksAgreeWithBenchMemoryWithinTenPercent) {
  const std::vector<Case> cases = {
      {"resnet50", "--image_size 64 --batch_size 4", {"none", "optimizer", "gradients", "full"}},
      {"vit_tiny_patch4_32", "--batch_size 2", {"none", "full"}},
  };
  for (const auto& c : cases) {
    const std::string common =
        std::string("--model ") + c.model + " " + c.flags + " --num_classes 10 --json";
    std::map<int, std::map<std::string, std::vector<double>>> predicted;  // by --gpus
    for (int gpus : {2}) {
      auto plan = run_command(test::ddpx_command("plan --gpus " + std::to_string(gpus) +
                                                 " --gpu_memory 80G --shard_only " + common),
                              300);
      ASSERT_EQ(plan.exit_code, 0) << plan.output;
      predicted[gpus] = by_shard(plan.output, "peak_bytes");
    }
    for (const std::string shard : c.shards) {
      const int ranks = 2;
      auto bench = run_command(
          std::string(shard == "optimizer" || shard == "gradients" ? "DDPX_GATHER_IN_PLACE=0 "
                                                                   : "") +
              test::ddpx_command("run 2 --threads_per_worker 1 -- bench memory " + common +
                                 " --shard " + shard +
                                 (shard == "none" ? " --transport gloo" : "")),
          300);
      ASSERT_EQ(bench.exit_code, 0) << bench.output;
      const auto measured = by_shard(bench.output, "tensor_peak_bytes");
      ASSERT_EQ(measured.count(shard), 1u) << bench.output;
      ASSERT_EQ(measured.at(shard).size(), static_cast<size_t>(ranks)) << "one line per rank\n"
                                                                       << bench.output;
      ASSERT_EQ(predicted[ranks].count(shard), 1u);
      const auto& rows = measured.at(shard);
      const double peak = *std::max_element(rows.begin(), rows.end());
      const double guess = predicted[ranks].at(shard)[0];
      std::printf("%s --shard %s: predicted %.1f MiB, measured %.1f MiB (%+.1f%%)\n", c.model,
                  shard.c_str(), guess / 1048576, peak / 1048576, (guess / peak - 1) * 100);
      EXPECT_NEAR(guess / peak, 1.0, 0.10)
          << c.model << " --shard " << shard << " on " << ranks << " rank(s): predicted "
          << guess / 1048576 << " MiB, measured " << peak / 1048576 << " MiB\n"
          << bench.output;
    }
  }
}

TEST(PlanCliTest, RecommendsAFlagThatFitsAndRefusesBadSizes) {
  auto roomy = run_command(test::ddpx_command("plan --model resnet18 --image_size 32 "
                                              "--batch_size 8 --gpus 2 --amp auto"),
                           120);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  // auto is planned as bf16, what the GPUs it plans for take, and measured so.
  EXPECT_NE(roomy.output.find("amp auto (planned as bf16"), std::string::npos) << roomy.output;
  EXPECT_NE(roomy.output.find("measured on this CPU under bf16 autocast"), std::string::npos)
      << roomy.output;
  EXPECT_NE(roomy.output.find("recommendation: --shard none (plain DDP)"), std::string::npos)
      << roomy.output;
  EXPECT_NE(roomy.output.find("# activations measured on this CPU"), std::string::npos);

  // ResNet-18's DDP states with Adam: (4 + 4 + 8) x 11.7 M = 179 MiB; 160 MiB holds only shards.
  auto tight = run_command(test::ddpx_command("plan --model resnet18 --image_size 32 "
                                              "--batch_size 8 --gpus 4 "
                                              "--optimizer adamw --gpu_memory 160M --reserve 0"),
                           120);
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  EXPECT_TRUE(std::regex_search(
      tight.output, std::regex("recommendation: --shard (optimizer|gradients|full)\\n")))
      << tight.output;
  EXPECT_TRUE(std::regex_search(tight.output, std::regex("\\n  none .* no \\(over by")))
      << tight.output;

  auto bad = run_command(test::ddpx_command("plan --model resnet18 --gpu_memory 80X"), 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--gpu_memory: expected a size such as 80G"), std::string::npos)
      << bad.output;
}

// `bench memory --pipeline_parallel 2` and `--tensor_parallel 2` on 2 real ranks: each rank holds
// parameters, gradients and optimizer state for its own stage or pieces only ((8+K)Psi_r,
// exactly), the stages' parameters add up to the whole model's, and a tensor rank holds less
// than the whole model.
TEST(BenchMemoryTest, PipelineStagesAndTensorPiecesHoldOnlyTheirOwnStates) {
  struct Split {
    std::string flags;
    bool stages_add_up;  // a pipeline's stages partition the model; pieces share unsplit layers
  };
  for (const Split& split :
       {Split{"--model resnet18 --image_size 32 --pipeline_parallel 2 --microbatches 2", true},
        Split{"--model mlp --image_size 16 --tensor_parallel 2", false}}) {
    test::TempDir dir;
    auto r = run_command(test::ddpx_command("run 2 --threads_per_worker 1 --log_dir " + dir.path() +
                                            " -- bench memory " + split.flags +
                                            " --batch_size 4 --num_classes 10 --json"),
                         300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto params = by_shard(r.output, "param_bytes");
    const auto states = by_shard(r.output, "grad_bytes");
    const auto formula = by_shard(r.output, "formula_bytes");
    const auto whole = by_shard(r.output, "parameters");
    ASSERT_EQ(params.count("none"), 1u) << r.output;
    ASSERT_EQ(params.at("none").size(), 2u) << "one line per rank\n" << r.output;
    const double whole_bytes = 4 * whole.at("none")[0];
    double sum = 0;
    for (int rank = 0; rank < 2; ++rank) {
      const double p = params.at("none")[rank];
      sum += p;
      EXPECT_LT(p, whole_bytes) << split.flags << ": rank " << rank << " holds the whole model\n"
                                << r.output;
      EXPECT_DOUBLE_EQ(p, states.at("none")[rank]) << "a gradient for each parameter held";
      EXPECT_DOUBLE_EQ(3 * p, formula.at("none")[rank]) << "(8+K)Psi_r with SGD momentum";
    }
    if (split.stages_add_up) EXPECT_DOUBLE_EQ(sum, whole_bytes) << r.output;
  }
  // 2 stages x 2 replicas that shard their stage (ZeRO-2): each rank's states are ZeRO's formula
  // over its stage's parameters, 4 Psi_r + (4 + K) Psi_r / 2 (on shared memory the shards are
  // rows of the parameters, no copy of their own), well below the unsharded (8 + K).
  test::TempDir dir;
  auto r = run_command(
      test::ddpx_command("run 4 --threads_per_worker 1 --log_dir " + dir.path() +
                         " -- bench memory --model resnet18 --image_size 32 "
                         "--pipeline_parallel 2 --microbatches 2 --shard gradients --batch_size 4 "
                         "--num_classes 10 --json"),
      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto params = by_shard(r.output, "param_bytes"), grads = by_shard(r.output, "grad_bytes"),
             optimizer = by_shard(r.output, "optimizer_bytes"),
             formula = by_shard(r.output, "formula_bytes");
  ASSERT_EQ(formula.count("gradients"), 1u) << r.output;
  ASSERT_EQ(formula.at("gradients").size(), 4u) << "one line per rank\n" << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    const double states = params.at("gradients")[rank] + grads.at("gradients")[rank] +
                          optimizer.at("gradients")[rank];
    const double want = formula.at("gradients")[rank];
    EXPECT_NEAR(states, want, 0.01 * want) << "rank " << rank << "\n" << r.output;
    // The stage whole (4 Psi_r, padded), its shards in it: twice the gradients' shard.
    EXPECT_NEAR(params.at("gradients")[rank], 2 * grads.at("gradients")[rank],
                0.01 * params.at("gradients")[rank])
        << "rank " << rank << "\n"
        << r.output;
  }
}

// Sequence parallelism on 3 real ranks: each rank keeps only its tokens between the split
// layers, so the activations it holds for backward there shrink to its share of the sequence:
// the LayerNorms' inputs and the column-parallel layers' inputs (q, k, v's and the MLP's first
// layer's, which are gathered again in backward), four a block. vit_tiny_patch4_32 at 32x32 has
// 65 tokens (22, 22 and 21 a rank), 6 blocks, width 192; at batch 4 one copy of the stream is
// 65 x 4 x 192 fp32 = 199,680 bytes. Each rank's activations (bytes a forward adds and still
// holds when backward starts) drop by at least the tokens it no longer holds, less two stream
// copies: collectives' buffers that are sometimes released a moment after backward starts (seen:
// up to one copy of the stream, or four of a rank's share of it).
TEST(BenchMemoryTest, SequenceParallelHoldsOnlyARanksTokensBetweenTheSplitLayers) {
  std::map<bool, std::vector<double>> activations;
  for (bool sequence : {false, true}) {
    test::TempDir dir;
    auto r =
        run_command(test::ddpx_command("run 3 --threads_per_worker 1 --log_dir " + dir.path() +
                                       " -- bench memory --model vit_tiny_patch4_32 --batch_size 4 "
                                       "--num_classes 10 --tensor_parallel 3 --json" +
                                       std::string(sequence ? " --sequence_parallel" : "")),
                    300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto by = by_shard(r.output, "activation_bytes");
    ASSERT_EQ(by.count("none"), 1u) << r.output;
    ASSERT_EQ(by.at("none").size(), 3u) << "one line per rank\n" << r.output;
    activations[sequence] = by.at("none");
  }
  const double stream = 65.0 * 4 * 192 * 4;
  const double between_split_layers = 6 * 4 * stream;
  const int tokens[3] = {22, 22, 21};
  for (int rank = 0; rank < 3; ++rank) {
    const double cut = activations[false][rank] - activations[true][rank];
    const double want = between_split_layers * (65 - tokens[rank]) / 65;
    EXPECT_GE(cut, want - 2 * stream)
        << "rank " << rank << ": " << activations[false][rank]
        << " bytes without sequence parallelism, " << activations[true][rank] << " with";
  }
}

// The JSON line of `ddpx plan`'s mesh whose "flags" start with `flags`.
std::string mesh_line(const std::string& text, const std::string& flags) {
  std::smatch m;
  const std::regex line("\\{\"mesh\": [^\\n]*\"flags\": \"" + flags + "[^\\n]*\\}");
  return std::regex_search(text, m, line) ? m[0].str() : "";
}

double number(const std::string& line, const std::string& key) {
  std::smatch m;
  return std::regex_search(line, m, std::regex("\"" + key + "\": ([0-9.e+]+)")) ? std::stod(m[1])
                                                                                : -1;
}

// The meshes `ddpx plan` offers, against `bench memory` on real ranks running the same layout
// (the replica's batch, micro-batches and balance from the plan's flags): a pipeline of ResNet-50
// (stages by parameters, as both are told) on 2 GPUs; the tiny ViT's tensor pieces (3 heads over
// 3 ranks) on 3, with and without sequence parallelism (65 tokens: 22, 22 and 21 a rank);
// ViT-B/16 on 4 as 2 replicas of 2 tensor ranks that shard the pieces (--shard full, gradients,
// optimizer); and 3-D meshes (pipelines of tensor-parallel stages) on 6 and 8, at batches whose
// activations are a quarter or more of the peak. The pieces' activations are the tiny ViT's
// (85-90% of its peak at 8 images a GPU; ViT-B/16's layouts alone on 2 and 4 GPUs cost a plan
// and benches several times longer for the same terms); the sharded replicas stay ViT-B/16's,
// whose states are half the peak, so a wrong shard term still moves it past 10% (the tiny ViT's
// states are a tenth of its peak). The meshes on 4 read one plan (96 x 96 images, 8 a GPU:
// activations are 35-51% of the peaks, so a wrong activation term still moves them past 10%; 16
// a GPU checked no more and its benches took about twice the CPU): the ViT-B/16 plan on 4 GPUs
// probes the model on 2 and 4 thread ranks (about 35 s of CPU, whatever the batch).
TEST(PlanCliTest, MeshPeaksAgreeWithBenchMemoryWithinTenPercent) {
  struct Mesh {
    int gpus;
    const char* plan;            // ddpx plan's flags
    std::string flags;           // the mesh's flags, as the plan prints them
    const char* bench;           // bench memory's flags for the same layout
    const char* shard = "none";  // the tensor-parallel replicas' --shard
    // How far the prediction may be from the measure: 10%, but 12% for the 3-D mesh with
    // sequence parallelism, whose probe runs on thread ranks that hand the sequence's
    // collectives' tensors across threads, so that a loaded machine's interleaving moves the
    // activations it counts (two CI runs of one commit under ctest -j2: +6.9% and +10.8%; idle,
    // the prediction is 26.9-27.6 MiB against 27.2-27.6 measured).
    double tolerance = 0.10;
  };
  const std::vector<Mesh> meshes = {
      {2, "--model resnet50 --image_size 64 --batch_size 16 --pipeline_balance params",
       "--pipeline_parallel 2 --microbatches 4 --batch_size 32 --pipeline_balance params",
       "--model resnet50 --image_size 64 --pipeline_parallel 2 --microbatches 4 --batch_size 32 "
       "--pipeline_balance params"},
      {3, "--model vit_tiny_patch4_32 --batch_size 8", "--tensor_parallel 3 --batch_size 24",
       "--model vit_tiny_patch4_32 --tensor_parallel 3 --batch_size 24"},
      {3, "--model vit_tiny_patch4_32 --batch_size 8",
       "--tensor_parallel 3 --sequence_parallel --batch_size 24",
       "--model vit_tiny_patch4_32 --tensor_parallel 3 --sequence_parallel --batch_size 24"},
      // Tensor parallelism with sharded replicas (2 replicas of 2 tensor ranks).
      {4, "--model vit_b_16 --image_size 96 --batch_size 8",
       "--tensor_parallel 2 --shard full --batch_size 16",
       "--model vit_b_16 --image_size 96 --tensor_parallel 2 --shard full --batch_size 16", "full"},
      {4, "--model vit_b_16 --image_size 96 --batch_size 8",
       "--tensor_parallel 2 --shard gradients --batch_size 16",
       "--model vit_b_16 --image_size 96 --tensor_parallel 2 --shard gradients --batch_size 16",
       "gradients"},
      {4, "--model vit_b_16 --image_size 96 --batch_size 8",
       "--tensor_parallel 2 --shard optimizer --batch_size 16",
       "--model vit_b_16 --image_size 96 --tensor_parallel 2 --shard optimizer --batch_size 16",
       "optimizer"},
      // The 3-D mesh, cut by parameters: the tiny ViT (3 heads) as 2 stages of 3 tensor ranks,
      // with and without sequence parallelism, and the MLP as 2 replicas of 2 stages of 2,
      // the replicas sharding the stages' pieces.
      {6, "--model vit_tiny_patch4_32 --batch_size 8",
       "--pipeline_parallel 2 --tensor_parallel 3 --microbatches 4 --batch_size 48",
       "--model vit_tiny_patch4_32 --pipeline_parallel 2 --tensor_parallel 3 --microbatches 4 "
       "--batch_size 48"},
      {6, "--model vit_tiny_patch4_32 --batch_size 8",
       "--pipeline_parallel 2 --tensor_parallel 3 --sequence_parallel --microbatches 4 "
       "--batch_size 48",
       "--model vit_tiny_patch4_32 --pipeline_parallel 2 --tensor_parallel 3 --sequence_parallel "
       "--microbatches 4 --batch_size 48",
       "none", 0.12},
      {8, "--model mlp --image_size 28 --batch_size 64",
       "--pipeline_parallel 2 --tensor_parallel 2 --microbatches 4 --batch_size 256 --shard full",
       "--model mlp --image_size 28 --pipeline_parallel 2 --tensor_parallel 2 --microbatches 4 "
       "--batch_size 256 --shard full",
       "full"},
  };
  std::map<std::string, std::string> plans;  // by the plan's flags: one probe a model
  for (const auto& mesh : meshes) {
    const std::string gpus = std::to_string(mesh.gpus);
    const std::string key = gpus + " " + mesh.plan;
    if (!plans.count(key)) {
      auto plan = run_command(
          test::ddpx_command("plan --gpus " + gpus + " --num_classes 10 --json " + mesh.plan), 300);
      ASSERT_EQ(plan.exit_code, 0) << plan.output;
      plans[key] = plan.output;
    }
    const std::string line = mesh_line(plans[key], mesh.flags);
    ASSERT_FALSE(line.empty()) << "no mesh with " << mesh.flags << "\n" << plans[key];
    const double guess = number(line, "peak_bytes");
    const double activations = number(line, "activation_bytes");

    test::TempDir dir;
    // ZeRO-1/2 in a GPU's layout (see PredictedPeaksAgreeWithBenchMemoryWithinTenPercent).
    const bool resident =
        std::string(mesh.shard) == "gradients" || std::string(mesh.shard) == "optimizer";
    auto bench = run_command(
        std::string(resident ? "DDPX_GATHER_IN_PLACE=0 " : "") +
            test::ddpx_command("run " + gpus + " --threads_per_worker 1 --log_dir " + dir.path() +
                               " -- bench memory --num_classes 10 " + "--json " + mesh.bench),
        300);
    ASSERT_EQ(bench.exit_code, 0) << bench.output;
    const auto measured = by_shard(bench.output, "tensor_peak_bytes");
    ASSERT_EQ(measured.count(mesh.shard), 1u) << bench.output;
    const auto& rows = measured.at(mesh.shard);
    ASSERT_EQ(rows.size(), static_cast<size_t>(mesh.gpus)) << "one line per rank\n" << bench.output;
    const double peak = *std::max_element(rows.begin(), rows.end());
    std::printf("%s: predicted %.1f MiB (activations %.1f), measured %.1f MiB (%+.1f%%)\n",
                mesh.bench, guess / 1048576, activations / 1048576, peak / 1048576,
                (guess / peak - 1) * 100);
    EXPECT_GT(activations, 0.25 * guess) << "activations that matter: " << line;
    EXPECT_NEAR(guess / peak, 1.0, mesh.tolerance)
        << mesh.bench << ": predicted " << guess / 1048576 << " MiB, measured " << peak / 1048576
        << " MiB\n"
        << line << "\n"
        << bench.output;
  }
}

// Where no --shard mode fits, a mesh that does is the recommendation (its flags, to paste), and
// the meshes' flags run in ddpx train as printed; a model without a tensor-parallel plan says so
// once.
TEST(PlanCliTest, RecommendsAMeshWhenNoShardModeFitsAndItsFlagsTrain) {
  // ResNet-50's activations at 128 x 128 do not shard under ZeRO; 2 stages with micro-batches of
  // 4 keep a fraction of them.
  auto tight = run_command(test::ddpx_command("plan --model resnet50 --gpus 2 --image_size 128 "
                                              "--batch_size 32 --num_classes 10 --gpu_memory 0.9G "
                                              "--reserve 0 --pipeline_balance params "
                                              "--microbatches 16"),
                           300);
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  EXPECT_TRUE(std::regex_search(tight.output, std::regex("\\n  full .* no \\(over by")))
      << tight.output;
  EXPECT_NE(tight.output.find("recommendation: --pipeline_parallel 2 --microbatches 16 "
                              "--batch_size 64 --pipeline_balance params (no --shard mode fits)"),
            std::string::npos)
      << tight.output;
  EXPECT_NE(tight.output.find("# not offered: tensor parallel: resnet50 has no tensor-parallel "
                              "plan"),
            std::string::npos)
      << tight.output;

  // ResNet-50's fp32 parameters (0.088 GiB) do not fit a GPU of 0.075 GiB, so no plan that puts
  // the whole model on it fits; 4 stages, built in host memory, each move only theirs there.
  auto big = run_command(test::ddpx_command("plan --model resnet50 --gpus 4 --image_size 32 "
                                            "--batch_size 2 --num_classes 10 --gpu_memory 0.075G "
                                            "--reserve 0 --pipeline_balance params "
                                            "--microbatches 4 --momentum 0"),
                         300);
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("recommendation: --pipeline_parallel 4 --microbatches 4 --batch_size 8 "
                            "--pipeline_balance params (no --shard mode fits)"),
            std::string::npos)
      << big.output;

  // A plan's mesh flags (the line whose flags start with `start`), trained as printed on 2
  // workers for two steps.
  auto flags_train = [](const std::string& plan, const std::string& start, const std::string& model,
                        int ranks = 2) {
    const std::string line = mesh_line(plan, start);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(line, m, std::regex("\"flags\": \"([^\"]+)\""))) << start << "\n"
                                                                                   << plan;
    if (m.empty()) return std::string();
    test::TempDir dir;
    auto train = run_command(
        test::ddpx_command("run " + std::to_string(ranks) + " --log_dir " + dir.path() +
                           " -- train --model " + model +
                           " --num_epochs 1 --limit_train_batches 2 --limit_test_batches 1 "
                           "--threads 1 --no_progress " +
                           m[1].str()),
        180);
    EXPECT_EQ(train.exit_code, 0) << m[1] << "\n" << train.output;
    return m[1].str();
  };
  auto mlp = run_command(test::ddpx_command("plan --model mlp --gpus 2 --image_size 28 "
                                            "--batch_size 8 --num_classes 10 --json"),
                         120);
  ASSERT_EQ(mlp.exit_code, 0) << mlp.output;
  for (const std::string flags : {"--tensor_parallel 2", "--pipeline_parallel 2"})
    flags_train(mlp.output, flags, "mlp --image_size 28");
  // On 4, stages whose 2 replicas shard them (the flags end with --shard full), and the 3-D
  // mesh: 2 stages of 2 tensor ranks.
  auto sharded = run_command(test::ddpx_command("plan --model mlp --gpus 4 --image_size 28 "
                                                "--batch_size 8 --num_classes 10 --json"),
                             120);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_NE(flags_train(sharded.output, "--pipeline_parallel 2 --microbatches[^\"]*--shard full",
                        "mlp --image_size 28", 4)
                .find("--shard full"),
            std::string::npos)
      << sharded.output;
  EXPECT_EQ(flags_train(sharded.output, "--pipeline_parallel 2 --tensor_parallel 2",
                        "mlp --image_size 28", 4),
            "--pipeline_parallel 2 --tensor_parallel 2 --microbatches 4 --batch_size 32")
      << sharded.output;
  EXPECT_NE(sharded.output.find("\"mesh\": \"1x2x2\""), std::string::npos) << sharded.output;

  // The interleaved schedule is planned too (V = 2 stages a rank, as ddpx train's default).
  auto interleaved = run_command(
      test::ddpx_command("plan --model resnet18 --gpus 2 --image_size 32 --batch_size 8 "
                         "--num_classes 10 --pipeline_schedule interleaved --json"),
      180);
  ASSERT_EQ(interleaved.exit_code, 0) << interleaved.output;
  EXPECT_NE(flags_train(interleaved.output, "--pipeline_parallel 2", "resnet18 --image_size 32")
                .find("--pipeline_schedule interleaved --stages_per_rank 2"),
            std::string::npos)
      << interleaved.output;
}

}  // namespace
}  // namespace ddpx

namespace ddpx {
namespace {

// The JSON line of `--shard S` in the plan's first table (the shard modes', not a mesh's).
std::string shard_line(const std::string& text, const std::string& shard) {
  std::regex line("\\{[^\\n]*\"shard\": \"" + shard + "\"[^\\n]*\\}");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator();
       ++it) {
    const std::string row = (*it)[0];
    if (row.find("\"mesh\"") == std::string::npos) return row;
  }
  return "";
}

// Language models, probed as copies of one and two of their blocks at the given --seq_len and
// carried to their depth (parallel/planner/depth_scale.h), against `bench memory` on real ranks
// running the full model in the same layout with AdamW (the plan's default for them, their
// recipes'): gpt-nano (4 blocks, GPT-2's 50,257 tokens: the vocabulary-parallel logits matter)
// under DDP, ZeRO-3, tensor parallelism with and without sequence parallelism, a pipeline (whose
// last stage keeps every micro-batch's logits), and DDP with every block recomputed; bert-nano
// under DDP and tensor parallelism. The mesh's flags
// are the plan's as printed, given to bench memory as they are.
TEST(PlanCliTest, LanguageModelPeaksAgreeWithBenchMemoryWithinTenPercent) {
  struct Layout {
    const char* plan;  // ddpx plan's flags (2 GPUs)
    std::string mesh;  // a mesh's flags as printed (a regex of their start), or "" for --shard
    const char* shard;
  };
  // Stages cut by parameters in both (the plan times the probe's copies' layers, not the model's).
  const std::string gpt = "--model gpt-nano --seq_len 64 --batch_size 4 --pipeline_balance params";
  // bert-nano at 128 tokens: probed at 64, the bytes a window adds carried to 128.
  const std::string bert = "--model bert-nano --seq_len 128 --batch_size 2";
  const std::string gpt_blocks = gpt + " --activation_checkpointing blocks";
  const std::vector<Layout> layouts = {
      {gpt.c_str(), "", "none"},
      {gpt.c_str(), "", "full"},
      {gpt.c_str(), "--tensor_parallel 2 --batch_size 8", "none"},
      {gpt.c_str(), "--tensor_parallel 2 --sequence_parallel --batch_size 8", "none"},
      {gpt.c_str(), "--pipeline_parallel 2 --microbatches [0-9]+ --batch_size 8", "none"},
      {gpt_blocks.c_str(), "", "none"},
      {bert.c_str(), "", "none"},
      {bert.c_str(), "--tensor_parallel 2 --batch_size 4", "none"},
  };
  std::map<std::string, std::string> plans;  // one plan a model and flags
  for (const auto& l : layouts) {
    if (!plans.count(l.plan)) {
      auto plan =
          run_command(test::ddpx_command(std::string("plan --gpus 2 --json ") + l.plan), 300);
      ASSERT_EQ(plan.exit_code, 0) << plan.output;
      plans[l.plan] = plan.output;
    }
    const std::string& text = plans[l.plan];
    const std::string line = l.mesh.empty() ? shard_line(text, l.shard) : mesh_line(text, l.mesh);
    ASSERT_FALSE(line.empty()) << "no line for " << l.mesh << " --shard " << l.shard << "\n"
                               << text;
    EXPECT_NE(text.find("\"optimizer\": \"adamw\""), std::string::npos) << text;
    std::string flags = std::string("--shard ") + l.shard;
    if (!l.mesh.empty()) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(line, m, std::regex("\"flags\": \"([^\"]+)\""))) << line;
      flags = m[1].str();
    }
    // The plan's model, sequence and checkpointing; the layout's batch from the mesh's flags.
    std::string bench_flags = std::regex_replace(
        std::string(l.plan), std::regex("--batch_size [0-9]+"), l.mesh.empty() ? "$&" : "");
    const double guess = number(line, "peak_bytes");
    test::TempDir dir;
    auto bench = run_command(
        test::ddpx_command(
            "run 2 --threads_per_worker 1 --log_dir " + dir.path() +
            " -- bench memory --json --optimizer adamw " + bench_flags + " " + flags +
            (l.mesh.empty() && std::string(l.shard) == "none" ? " --transport gloo" : "")),
        300);
    ASSERT_EQ(bench.exit_code, 0) << bench.output;
    const auto measured = by_shard(bench.output, "tensor_peak_bytes");
    ASSERT_EQ(measured.count(l.shard), 1u) << bench.output;
    const auto& rows = measured.at(l.shard);
    ASSERT_EQ(rows.size(), 2u) << "one line per rank\n" << bench.output;
    const double peak = *std::max_element(rows.begin(), rows.end());
    std::printf("%s %s: predicted %.1f MiB, measured %.1f MiB (%+.1f%%)\n", l.plan, flags.c_str(),
                guess / 1048576, peak / 1048576, (guess / peak - 1) * 100);
    EXPECT_NEAR(guess / peak, 1.0, 0.10)
        << l.plan << " " << flags << ": predicted " << guess / 1048576 << " MiB, measured "
        << peak / 1048576 << " MiB\n"
        << line << "\n"
        << bench.output;
  }
}

// GPT-2 XL (1.56 B parameters) on 8 GPUs of 80 GB at 1024 tokens: planned in ~33 s of CPU from
// copies of one and two of its 48 blocks at 64 tokens; AdamW's states alone are 25 GB under DDP.
// The recommendation fits, and its flags parse in ddpx train as printed. The command is
// docs/language-models.md's, as printed there (DocsFixturesTest leaves it to this test).
TEST(PlanCliTest, Gpt2XlOnEightGpusGetsALayoutThatFitsAndItsFlagsParseInTrain) {
  const std::string command = "plan --model gpt2-xl --gpus 8 --gpu_memory 80G --seq_len 1024";
  std::ifstream doc(test::source_dir() + "/docs/language-models.md");
  std::stringstream text;
  text << doc.rdbuf();
  EXPECT_TRUE(test::has(text.str(), "`ddpx " + command + "`"))
      << "docs/language-models.md no longer prints `ddpx " << command
      << "`: run the command it prints here";
  auto plan = run_command(test::ddpx_command(command), 600);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("sequences of 1024 tokens over a vocabulary of 50257"),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("adamw (K = 8 bytes a parameter)"), std::string::npos) << plan.output;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(plan.output, m, std::regex("\\nrecommendation: (--[^\\n(]*[^ \\n(])")))
      << plan.output;
  const std::string flags = m[1].str();
  EXPECT_EQ(plan.output.find("nothing fits"), std::string::npos) << plan.output;
  test::TempDir dir;
  auto train = run_command(
      "cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=1 " +
          test::ddpx_command(
              "train --model gpt2-xl --dataset tokens --data_dir data --seq_len "
              "1024 " +
              (flags.rfind("--shard none", 0) == 0 ? std::string("--shard none") : flags)),
      60);
  EXPECT_EQ(train.exit_code, 0) << flags << "\n" << train.output;
}

// --no_bias reaches the model that plan probes and that bench memory steps, as train builds it:
// gpt-nano (4 blocks of width C = 128) loses 11 C a block (ln_1's and ln_2's, c_attn's 3 C, the
// attention's and the MLP's c_proj's C each, c_fc's 4 C) and ln_f's C, 5,760 fp32 parameters;
// a model outside the GPT family is refused naming the flag. bench memory steps a language model
// on token windows without a layout flag too.
TEST(PlanCliTest, NoBiasPlansAndMeasuresAGptWithoutItsBiases) {
  const double biases = (4 * 11 * 128 + 128) * 4.0;
  // The DDP row's parameter bytes (rank 0's) of a command's JSON lines.
  const auto ddp_params = [](const std::string& command) {
    auto r = run_command(test::ddpx_command(command), 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto params = by_shard(r.output, "param_bytes");
    EXPECT_EQ(params.count("none"), 1u) << r.output;
    return params.count("none") ? params.at("none")[0] : -1.0;
  };
  std::map<bool, double> planned, measured;
  for (bool bias : {true, false}) {
    const std::string flag = bias ? "" : " --no_bias";
    planned[bias] = ddp_params(
        "plan --model gpt-nano --gpus 2 --seq_len 32 --batch_size 4 --gpu_memory 2G --shard_only "
        "--json" +
        flag);
    test::TempDir dir;
    measured[bias] = ddp_params("run 2 --threads_per_worker 1 --log_dir " + dir.path() +
                                " -- bench memory --model gpt-nano --seq_len 32 --batch_size 2 "
                                "--shard none --json" +
                                flag);
  }
  EXPECT_DOUBLE_EQ(planned[true] - planned[false], biases);
  EXPECT_DOUBLE_EQ(measured[true] - measured[false], biases);
  EXPECT_DOUBLE_EQ(planned[false], measured[false]) << "the plan's parameters are bench memory's";

  // A language model alone, with no layout flag, steps on token windows (it was fed images).
  auto alone = run_command(test::ddpx_command("bench memory --model gpt-nano --seq_len 32 "
                                              "--batch_size 2 --no_bias"),
                           120);
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_TRUE(test::has(alone.output,
                        "gpt-nano (7.23 M parameters, no biases), 32 tokens a "
                        "sequence, batch 2 per rank"))
      << alone.output;

  auto refused = run_command(test::ddpx_command("plan --model resnet18 --gpus 2 --no_bias"), 60);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_TRUE(test::has(refused.output, "--no_bias: resnet18 keeps its own biases"))
      << refused.output;
}

}  // namespace
}  // namespace ddpx
