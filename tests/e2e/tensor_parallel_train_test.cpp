// `ddpx run N -- train --tensor_parallel T` as a user runs it, each rank a real process: the
// ViT split over 3 ranks (and with sequence parallelism and recomputed blocks) prints the single
// process's loss and
// accuracy and saves a checkpoint whose export torchvision's VisionTransformer loads with every
// key, holding the single process's weights; a 2 x 2 mesh of data x tensor on the MLP, its pieces
// averaged by DDP or sharded (ZeRO-3) over the replicas, prints what two data-parallel workers
// print, and so does a 2 x 2 x 2 mesh of data x pipeline x tensor on 8 ranks (also with its
// stages sharded over the replicas); the ViT on a 1 x 2 x 3 mesh, sequence parallel, prints the
// single process's figures and exports its weights, and its checkpoint resumes in one process
// and over 3 tensor ranks as the single process's own does; layouts that cannot run are refused
// in one line naming the flag.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "e2e/refused_job.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;
using test::shell_quote;

// The figures of the epoch line and the test accuracy: "loss_train - 2.3178", ...
std::vector<double> printed_figures(const std::string& output) {
  static const std::regex figure(R"((loss_train|accuracy_train|test dataset) - ([0-9.]+))");
  std::vector<double> out;
  for (std::sregex_iterator it(output.begin(), output.end(), figure), end; it != end; ++it) {
    out.push_back(std::stod((*it)[2]));
  }
  return out;
}

// The first `count` figures (loss_train, accuracy_train, test accuracy) agree to the printed
// digits. The test accuracy compares only where both evaluate the whole test set: with
// --limit_test_batches each rank evaluates that many batches of its share.
void expect_same_figures(const std::string& got, const std::string& want, size_t count) {
  const auto a = printed_figures(got), b = printed_figures(want);
  ASSERT_EQ(a.size(), 3u) << got;
  ASSERT_EQ(b.size(), 3u) << want;
  for (size_t i = 0; i < count; ++i) EXPECT_NEAR(a[i], b[i], 2e-4) << got << "\n" << want;
}

const std::string kVitTrain =
    "train --model vit_tiny_patch4_32 --optimizer sgd --num_epochs 1 --limit_train_batches 3 "
    "--limit_test_batches 1 --batch_size 16 --eval_batch_size 64 --threads 1 --no_progress ";

TEST(TensorParallelTrainTest, AViTOverThreeRanksTrainsAsOneProcessAndExportsTorchvisionsKeys) {
  test::TempDir dir;
  auto one = run_command(ddpx(kVitTrain + "--save_dir " + dir.file("one")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto split = run_command(ddpx("run 3 --log_dir " + dir.file("logs") + " -- " + kVitTrain +
                                "--tensor_parallel 3 --save_dir " + dir.file("split")),
                           300);
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("tensor parallel: 3 ranks a layer x 1 data-parallel replica (6 "
                              "blocks: 3 heads -> 1 a rank, MLP width 768 -> 256"),
            std::string::npos)
      << split.output;
  EXPECT_NE(split.output.find("mesh (data x tensor) 1 x 3: replica 0: ranks 0 1 2"),
            std::string::npos)
      << split.output;
  EXPECT_NE(split.output.find("batch size 16 per data-parallel replica, global batch 16"),
            std::string::npos)
      << split.output;
  expect_same_figures(split.output, one.output, 2);
  // With sequence parallelism (65 tokens in shares of 22, 22 and 21) and the split blocks
  // recomputed in backward.
  auto sequence =
      run_command(ddpx("run 3 --log_dir " + dir.file("logs_sequence") + " -- " + kVitTrain +
                       "--tensor_parallel 3 --sequence_parallel "
                       "--activation_checkpointing blocks"),
                  300);
  ASSERT_EQ(sequence.exit_code, 0) << sequence.output;
  EXPECT_NE(sequence.output.find("sequence parallel: LayerNorms, dropouts and residuals over 1/T"),
            std::string::npos)
      << sequence.output;
  expect_same_figures(sequence.output, one.output, 2);
  // The 3-D mesh's pipeline axis: 2 stages of 4 layers, each split over 3 ranks, sequence
  // parallel (each tensor rank's share of the tokens crosses the stage boundary), recomputing
  // their blocks; its checkpoint exports the same weights.
  auto mesh = run_command(ddpx("run 6 --log_dir " + dir.file("logs_mesh") + " -- " + kVitTrain +
                               "--tensor_parallel 3 --pipeline_parallel 2 --sequence_parallel "
                               "--activation_checkpointing blocks --save_dir " +
                               dir.file("mesh")),
                          300);
  ASSERT_EQ(mesh.exit_code, 0) << mesh.output;
  for (const char* line :
       {"mesh (data x pipeline x tensor) 1 x 2 x 3: replica 0: stage 0 ranks 0 1 2, stage 1 ranks "
        "3 4 5",
        "(each stage split over 3 tensor ranks; parameters: a rank's pieces)",
        "      0           0-2  embed .. encoder.layers.encoder_layer_2 (4)",
        "      1           3-5  encoder.layers.encoder_layer_3 .. head (4)"}) {
    EXPECT_NE(mesh.output.find(line), std::string::npos) << line << "\n" << mesh.output;
  }
  expect_same_figures(mesh.output, one.output, 2);

  // The mesh's checkpoint resumes at other shapes: in one process and over 3 tensor ranks, its
  // second epoch prints what the single process's own checkpoint, resumed, prints.
  const std::string two_epochs =
      std::regex_replace(kVitTrain, std::regex("--num_epochs 1"), "--num_epochs 2");
  const auto resume = [&](const std::string& run) {
    return " --resume " + dir.file(run) + "/checkpoint_epoch0001.ddpx";
  };
  auto want = run_command(ddpx(two_epochs + resume("one")), 300);
  ASSERT_EQ(want.exit_code, 0) << want.output;
  auto in_one = run_command(ddpx(two_epochs + resume("mesh")), 300);
  ASSERT_EQ(in_one.exit_code, 0) << in_one.output;
  expect_same_figures(in_one.output, want.output, 2);
  auto in_three = run_command(ddpx("run 3 --log_dir " + dir.file("logs_resumed") + " -- " +
                                   two_epochs + "--tensor_parallel 3" + resume("mesh")),
                              300);
  ASSERT_EQ(in_three.exit_code, 0) << in_three.output;
  expect_same_figures(in_three.output, want.output, 2);

  for (const std::string run : {"one", "split", "mesh"}) {
    auto exported = run_command(ddpx("export --checkpoint " + dir.file(run) +
                                     "/checkpoint_epoch0001.ddpx --out " + dir.file(run + ".pt")),
                                120);
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
  }
  auto py = test::run_python(
      "import torch, torchvision\n"
      "m = torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, "
      "num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=10)\n"
      "b = torch.load(" +
      shell_quote(dir.file("one.pt")) +
      ")\n"
      "for f in [" +
      shell_quote(dir.file("split.pt")) + ", " + shell_quote(dir.file("mesh.pt")) +
      "]:\n"
      "  a = torch.load(f)\n"
      "  r = m.load_state_dict(a)\n"
      "  print('missing', len(r.missing_keys), 'unexpected', len(r.unexpected_keys))\n"
      "  d = max(((a[k] - b[k]).abs().max() / b[k].abs().max().clamp_min(1e-6)).item() for k in "
      "b)\n"
      "  print('relative diff', d)\n  assert d < 1e-4, (f, d)\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  // Both exports load with every key.
  size_t loaded = 0;
  for (size_t at = py.output.find("missing 0 unexpected 0"); at != std::string::npos;
       at = py.output.find("missing 0 unexpected 0", at + 1)) {
    ++loaded;
  }
  EXPECT_EQ(loaded, 2u) << py.output;
}

const std::string kMlpTrain =
    "train --model mlp --num_epochs 1 --limit_train_batches 20 --batch_size 32 --threads 1 "
    "--no_progress ";

TEST(TensorParallelTrainTest, ATwoByTwoMeshPrintsWhatTwoDataParallelWorkersPrint) {
  test::TempDir dir;
  auto ddp = run_command(ddpx("run 2 --log_dir " + dir.file("a") + " -- " + kMlpTrain), 300);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto mesh = run_command(
      ddpx("run 4 --log_dir " + dir.file("b") + " -- " + kMlpTrain + "--tensor_parallel 2"), 300);
  ASSERT_EQ(mesh.exit_code, 0) << mesh.output;
  EXPECT_NE(mesh.output.find("mesh (data x tensor) 2 x 2: replica 0: ranks 0 1 | replica 1: "
                             "ranks 2 3; each piece averaged over its replicas by DDP"),
            std::string::npos)
      << mesh.output;
  expect_same_figures(mesh.output, ddp.output, 3);
  // Each piece sharded over its 2 replicas (ZeRO-3) instead of averaged whole by DDP.
  auto sharded = run_command(ddpx("run 4 --log_dir " + dir.file("c") + " -- " + kMlpTrain +
                                  "--tensor_parallel 2 --shard full"),
                             300);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_NE(sharded.output.find("each piece sharded over its replicas (--shard full)"),
            std::string::npos)
      << sharded.output;
  expect_same_figures(sharded.output, ddp.output, 3);
  // The 3-D mesh: 2 replicas of 2 stages of 2 tensor ranks, on 8 ranks.
  auto mesh3 = run_command(ddpx("run 8 --log_dir " + dir.file("d") + " -- " + kMlpTrain +
                                "--tensor_parallel 2 --pipeline_parallel 2"),
                           300);
  ASSERT_EQ(mesh3.exit_code, 0) << mesh3.output;
  EXPECT_NE(mesh3.output.find("mesh (data x pipeline x tensor) 2 x 2 x 2: replica 0: stage 0 "
                              "ranks 0 1, stage 1 ranks 2 3 | replica 1: stage 0 ranks 4 5, stage "
                              "1 ranks 6 7"),
            std::string::npos)
      << mesh3.output;
  EXPECT_NE(mesh3.output.find("      0       0-1,4-5  fc1"), std::string::npos) << mesh3.output;
  expect_same_figures(mesh3.output, ddp.output, 3);
  // ... with each stage's pieces sharded over its 2 replicas (ZeRO-3 on the 3-D mesh).
  auto sharded3 = run_command(ddpx("run 8 --log_dir " + dir.file("e") + " -- " + kMlpTrain +
                                   "--tensor_parallel 2 --pipeline_parallel 2 --shard full"),
                              300);
  ASSERT_EQ(sharded3.exit_code, 0) << sharded3.output;
  EXPECT_NE(sharded3.output.find("each stage sharded over its 2 replicas (--shard full, ZeRO-3)"),
            std::string::npos)
      << sharded3.output;
  expect_same_figures(sharded3.output, ddp.output, 3);
}

TEST(TensorParallelTrainTest, LayoutsThatCannotRunAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> before_joining = {
      {"--tensor_parallel 0", "--tensor_parallel must be at least 1"},
      {"--sequence_parallel", "--sequence_parallel splits the tokens among the ranks of"},
  };
  for (const auto& [flags, expected] : before_joining) {
    auto r = run_command(ddpx(kMlpTrain + flags), 60);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
  }
  // Known once the job has joined, refused by every rank before the plan's first collective.
  struct Joined {
    int ranks;
    std::string train, expected;
  };
  const std::string mlp = kMlpTrain + "--tensor_parallel 2";
  const std::vector<Joined> joined = {
      {3, mlp,
       "--tensor_parallel 2: the world of 3 ranks is not a whole number of tensor-parallel "
       "groups"},
      {6, mlp + " --pipeline_parallel 2",
       "--pipeline_parallel 2 x --tensor_parallel 2: the world of 6 ranks is not a whole number "
       "of 4-rank replicas; start a multiple of 4 ranks"},
      {2, std::regex_replace(mlp, std::regex("--model mlp"), "--model resnet18"),
       "--tensor_parallel 2: resnet18 has no tensor-parallel plan"},
      {2, kVitTrain + "--tensor_parallel 2",
       "--tensor_parallel 2: vit_tiny_patch4_32's attention heads (3) do not split over 2 ranks"},
  };
  for (const auto& j : joined) {
    SCOPED_TRACE(j.train);
    test::expect_job_refused_before_any_collective(j.ranks, j.train, {j.expected});
  }
}

}  // namespace
}  // namespace ddpx
