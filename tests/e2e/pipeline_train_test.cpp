// `ddpx run N -- train --pipeline_parallel P` as a user runs it: two stages train the MLP to the
// single process's losses and weights, four workers as 2 stages x 2 replicas to DDP's on two
// (also with the replicas sharding their stage, which resumes its own checkpoint),
// the pipeline's checkpoint, written by stage, resumes in one process where the single
// process's own run ends, `--checkpoint_format whole` writes one file instead, a
// zoo ResNet is cut by timing its layers and the table says so, layouts or flags that cannot go
// together are refused in one line naming them, and a killed stage ends the job naming it.
// --activation_checkpointing trains as without it: DDP, a pipeline and a BatchNorm ResNet; ddpx
// plan counts fewer activations with it.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "e2e/refused_job.h"
#include "e2e/token_fixture.h"
#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::numbers_after;
using test::run_command;

using test::ddpx;

const std::string kMlp =
    "train --model mlp --dataset synthetic --synthetic_size 256 --synthetic_image 8 "
    "--batch_size 16 --no_flip --threads 1 --seed 5 --learning_rate 0.05 --optimizer sgd "
    "--limit_test_batches 0 --lr_schedule constant ";  // the same rates in a 2- and a 3-epoch run

std::map<std::string, torch::Tensor> weights_of(const std::string& checkpoint) {
  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  auto model = models::create_model("mlp", config);
  train::load_checkpoint_weights(checkpoint, *model.ptr());
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.ptr()->named_parameters()) out[item.key()] = item.value();
  return out;
}

// After 48 SGD steps whose gradients were summed in another order (4 micro-batches of 4 against
// one batch of 16), the rounding grows to about 1e-5 (1.1e-5 on an AVX-512 host); a mistake in
// the schedule (a micro-batch lost or counted twice) moves the weights by 1e-2 and more.
void expect_same_weights(const std::string& a, const std::string& b) {
  auto wa = weights_of(a), wb = weights_of(b);
  for (const auto& [name, value] : wa) {
    EXPECT_LT((value - wb.at(name)).abs().max().item<double>(), 5e-5) << name;
  }
}

TEST(PipelineTrainTest, TwoStagesTrainTheMlpAsOneProcessAndItsCheckpointResumesThere) {
  test::TempDir dir;
  auto single = run_command(ddpx(kMlp + "--num_epochs 3 --save_dir " + dir.file("single")), 300);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  auto piped = run_command(ddpx("run 2 --log_dir " + dir.file("l") + " -- " + kMlp +
                                "--num_epochs 2 --pipeline_parallel 2 --microbatches 4 "
                                "--pipeline_schedule gpipe --save_dir " +
                                dir.file("piped")),
                           300);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_NE(piped.output.find("pipeline: 2 stages on 2 ranks a replica, 1 replica"),
            std::string::npos)
      << piped.output;
  EXPECT_NE(
      piped.output.find("plan: pipeline parallel: 2 stages x 1 data-parallel replica "
                        "(gpipe, 4 micro-batches; BatchNorm statistics per micro-batch; stage "
                        "boundaries by Gloo send/recv)"),
      std::string::npos)
      << piped.output;
  // The step the stages take (optim::fused_step), as the other plans name theirs.
  EXPECT_NE(piped.output.find("optimizer step: fused SGD, on this rank's stages | plan: pipeline"),
            std::string::npos)
      << piped.output;
  auto loss_single = numbers_after(single.output, "loss_train");
  auto loss_piped = numbers_after(piped.output, "loss_train");
  ASSERT_EQ(loss_single.size(), 3u) << single.output;
  ASSERT_EQ(loss_piped.size(), 2u) << piped.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(loss_single[i], loss_piped[i], 1e-4) << "epoch " << i;
  // Evaluated through the two stages: the single process's test accuracy.
  auto acc_single = numbers_after(single.output, "Accuracy on test dataset");
  auto acc_piped = numbers_after(piped.output, "Accuracy on test dataset");
  ASSERT_EQ(acc_single.size(), 3u) << single.output;
  ASSERT_EQ(acc_piped.size(), 2u) << piped.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(acc_single[i], acc_piped[i], 1e-3) << "epoch " << i;
  expect_same_weights(train::checkpoint_path(dir.file("single"), 2),
                      train::checkpoint_path(dir.file("piped"), 2));
  // Written by stage: a folder of each rank's part, nothing gathered.
  const std::string by_stage = train::checkpoint_path(dir.file("piped"), 2);
  EXPECT_TRUE(std::filesystem::is_regular_file(by_stage + "/rank00001-of-00002.ddpx")) << by_stage;

  // One process resumes the pipeline's checkpoint, optimizer state included, for epoch 3.
  auto resumed = run_command(
      ddpx(kMlp + "--num_epochs 3 --save_dir " + dir.file("piped") + " --resume auto"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_weights(train::checkpoint_path(dir.file("single"), 3),
                      train::checkpoint_path(dir.file("piped"), 3));
}

// 2 stages x 2 replicas train as DDP on two, and so do they with each stage sharded over its
// replicas (--shard full, clipped by the whole model's norm), whose checkpoint resumes at that
// layout where DDP's run goes on.
TEST(PipelineTrainTest, FourWorkersAsTwoStagesTimesTwoReplicasTrainAsTwoDdpWorkers) {
  test::TempDir dir;
  const std::string clip = "--clip_grad_norm 0.5 ";
  auto ddp = run_command(ddpx("run 2 --log_dir " + dir.file("l1") + " -- " + kMlp + clip +
                              "--num_epochs 3 --save_dir " + dir.file("ddp")),
                         300);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto loss_ddp = numbers_after(ddp.output, "loss_train");
  auto acc_ddp = numbers_after(ddp.output, "Accuracy on test dataset");
  ASSERT_EQ(loss_ddp.size(), 3u) << ddp.output;
  ASSERT_EQ(acc_ddp.size(), 3u);
  for (const std::string shard : {"none", "full"}) {
    SCOPED_TRACE("--shard " + shard);
    const std::string save = dir.file("piped_" + shard);
    // Unsharded, the checkpoint is written whole on request (rank 0 gathers every stage); the
    // sharded one by stage (each replica its shards).
    auto piped =
        run_command(ddpx("run 4 --log_dir " + dir.file("l2" + shard) + " -- " + kMlp + clip +
                         "--num_epochs 2 --pipeline_parallel 2 --shard " + shard + " --save_dir " +
                         save + (shard == "none" ? " --checkpoint_format whole" : "")),
                    300);
    ASSERT_EQ(piped.exit_code, 0) << piped.output;
    EXPECT_NE(piped.output.find("2 stages x 2 data-parallel replicas (1f1b, 4 micro-batches"),
              std::string::npos)
        << piped.output;
    if (shard == "none") {
      EXPECT_NE(piped.output.find("the replicas average each stage's gradients in buckets "
                                  "launched during its last micro-batch's backward"),
                std::string::npos)
          << piped.output;
    }
    if (shard == "full") {
      EXPECT_NE(piped.output.find("each stage sharded over its 2 replicas (--shard full, ZeRO-3)"),
                std::string::npos)
          << piped.output;
    }
    auto loss_piped = numbers_after(piped.output, "loss_train");
    ASSERT_EQ(loss_piped.size(), 2u) << piped.output;
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(loss_ddp[i], loss_piped[i], 1e-4) << "epoch " << i;
    auto acc_piped = numbers_after(piped.output, "Accuracy on test dataset");
    ASSERT_EQ(acc_piped.size(), 2u);
    EXPECT_NEAR(acc_ddp[1], acc_piped[1], 1e-3);
    expect_same_weights(train::checkpoint_path(dir.file("ddp"), 2),
                        train::checkpoint_path(save, 2));
    EXPECT_EQ(std::filesystem::is_regular_file(train::checkpoint_path(save, 2)), shard == "none");
    if (shard != "full") continue;
    // The sharded pipeline resumes its own checkpoint, optimizer state included, for epoch 3.
    auto resumed = run_command(ddpx("run 4 --log_dir " + dir.file("l3") + " -- " + kMlp + clip +
                                    "--num_epochs 3 --pipeline_parallel 2 --shard full "
                                    "--resume auto --save_dir " +
                                    save),
                               300);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    expect_same_weights(train::checkpoint_path(dir.file("ddp"), 3),
                        train::checkpoint_path(save, 3));
  }
}

TEST(PipelineTrainTest, AZooResNetIsCutByItsTimedLayers) {
  test::TempDir dir;
  auto r = run_command(
      ddpx("run 2 --log_dir " + dir.path() +
           " -- train --model resnet18 --dataset synthetic --synthetic_size 32 "
           "--synthetic_image 32 --image_size 32 --batch_size 8 --num_epochs 1 --threads 1 "
           "--limit_test_batches 1 --pipeline_parallel 2 --pipeline_schedule interleaved"),
      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 4 stages (2 a rank) over stem, 8 blocks and head, each with its measured milliseconds.
  EXPECT_NE(r.output.find("pipeline: 4 stages on 2 ranks a replica, 1 replica"), std::string::npos)
      << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex(R"(\n\s+0\s+0\s+stem \.\. .*\s[0-9]+\.[0-9]{2}\n)")))
      << r.output;
  EXPECT_NE(r.output.find("(interleaved, 4 micro-batches, 2 stages a rank;"), std::string::npos)
      << r.output;
  EXPECT_EQ(numbers_after(r.output, "loss_train").size(), 1u) << r.output;
  // Each rank's bubble and the activations it held (interleaved: up to 2 stages x 4).
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(R"(pipeline bubble \(idle share of each rank's forward and backward\) by )"
                 R"(rank: 0 [0-9.]+% \| 1 [0-9.]+%; micro-batch activations held at )"
                 R"(most: 0 [1-8] \| 1 [1-8])")))
      << r.output;
}

TEST(PipelineTrainTest, LayoutsAndFlagsThatCannotGoTogetherAreRefusedInOneLine) {
  auto sync_bn = run_command(ddpx(kMlp + "--pipeline_parallel 2 --sync_bn"), 60);
  EXPECT_EQ(sync_bn.exit_code, 2) << sync_bn.output;
  EXPECT_NE(sync_bn.output.find("--sync_bn with --pipeline_parallel 2"), std::string::npos)
      << sync_bn.output;
  auto units = run_command(ddpx(kMlp + "--pipeline_parallel 2 --shard full --shard_units fc1"), 60);
  EXPECT_EQ(units.exit_code, 2) << units.output;
  EXPECT_NE(units.output.find("--shard_units with --pipeline_parallel 2: a pipeline shards each of "
                              "its stages as one unit"),
            std::string::npos)
      << units.output;
  auto micro = run_command(ddpx(kMlp + "--pipeline_parallel 2 --microbatches 32"), 60);
  EXPECT_EQ(micro.exit_code, 2) << micro.output;
  EXPECT_NE(micro.output.find("--batch_size 16 does not divide into --microbatches 32: each "
                              "micro-batch takes the same rows; pick a batch that 32 divides "
                              "(32 or 64)"),
            std::string::npos)
      << micro.output;
  auto odd = run_command(ddpx(kMlp + "--pipeline_parallel 2 --pipeline_schedule interleaved "
                                     "--microbatches 3"),
                         60);
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("3 micro-batches is not a multiple of 2"), std::string::npos)
      << odd.output;
  auto few = run_command(ddpx(kMlp + "--pipeline_parallel 4 --microbatches 2"), 60);
  EXPECT_EQ(few.exit_code, 2) << few.output;
  EXPECT_NE(few.output.find("1f1b needs at least one micro-batch a stage to fill the pipeline: 2 "
                            "micro-batches for 4 stages"),
            std::string::npos)
      << few.output;
  test::expect_job_refused_before_any_collective(
      3, kMlp + "--pipeline_parallel 2",
      {"--pipeline_parallel 2 does not divide the world of 3 ranks"});
  test::expect_job_refused_before_any_collective(
      2, kMlp + "--pipeline_parallel 2 --pipeline_schedule interleaved",
      {"mlp has 3 layers a pipeline can cut between, fewer than the 4 stages asked for"});
  test::TempDir dir;
  // Micro-batches of one sample leave BatchNorm one value a channel at ResNet-18's last stage:
  // the failing stage's own line, not its neighbour's lost connection, names the flag.
  auto tiny = run_command(ddpx("run 2 --log_dir " + dir.file("t") +
                               " -- train --model resnet18 --image_size 32 --batch_size 8 "
                               "--pipeline_parallel 2 --microbatches 8 --num_epochs 1 "
                               "--limit_train_batches 2 --threads 1 --no_progress"),
                          120);
  EXPECT_EQ(tiny.exit_code, 2) << tiny.output;
  EXPECT_TRUE(
      std::regex_search(tiny.output, std::regex("ddpx run: rank [01] .* failed with exit code 2")))
      << tiny.output;
  EXPECT_NE(tiny.output.find("a micro-batch of 1 sample(s) leaves BatchNorm one value a channel; "
                             "give fewer --microbatches (8) or a larger --batch_size"),
            std::string::npos)
      << tiny.output;
}

// Ranks that see different folders under one --save_dir (nodes without a shared file system,
// here each rank's own folder) are refused before training, naming the ranks and the fix;
// `--checkpoint_format whole` then trains and writes rank 0's file.
TEST(PipelineTrainTest, ASaveDirTheRanksDoNotShareIsRefusedBeforeTraining) {
  test::TempDir dir;
  auto own_folders = [&](const std::string& log, const std::string& extra) {
    return run_command(ddpx("run 2 --log_dir " + dir.file(log) + " -- sh -c " +
                            test::shell_quote("exec " + test::ddpx_binary() + " " + kMlp +
                                              "--num_epochs 1 --pipeline_parallel 2 --save_dir " +
                                              dir.path() + "/own$RANK" + extra)),
                       120);
  };
  auto refused = own_folders("refused", "");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("rank(s) 1 do not see the file rank 0 wrote there"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("Epoch - 0/1"), std::string::npos) << "refused after training";
  auto whole = own_folders("whole", " --checkpoint_format whole");
  EXPECT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_TRUE(std::filesystem::is_regular_file(train::checkpoint_path(dir.file("own0"), 1)));
}

// A stage's worker killed mid-run ends the job within seconds, naming it; no rank waits out a
// collective timeout, and no worker is left behind.
TEST(PipelineTrainTest, AKilledStageEndsTheJobNamingIt) {
  test::TempDir dir;
  const std::string marker = "--seed 4344" + std::to_string(test::free_port());
  std::string command = ddpx("run 2 --grace_s 2 --log_dir " + dir.path() +
                             " -- train --model mlp --dataset synthetic --synthetic_size 200000 "
                             "--synthetic_image 8 --batch_size 16 --num_epochs 1 "
                             "--pipeline_parallel 2 " +
                             marker);
  const std::string pattern = "[-]" + marker.substr(1);
  std::string killer =
      "( for i in $(seq 1 300); do "
      "if grep -q 'world size' " +
      dir.path() +
      "/*/rank0.log 2>/dev/null; then sleep 2; "
      "for p in $(pgrep -f -- '" +
      pattern +
      "'); do "
      "if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=1; then "
      "kill -KILL $p; exit 0; fi; done; fi; sleep 0.2; done ) & ";
  auto start = std::chrono::steady_clock::now();
  auto r = run_command(killer + command, 180);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 60) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("rank 1 .*(killed|signal|SIGKILL)")))
      << r.output;
  EXPECT_EQ(run_command("pgrep -f -- '" + pattern + "'", 10).output, "") << "no orphans";
}

// A worker killed under data x pipeline x tensor parallelism with ZeRO-3 (DP2 x PP2 x TP2, a GPT
// on real text, a checkpoint each one-step epoch): the job ends within seconds naming it, no
// worker is left behind, and `--resume auto` on the same 8 ranks continues from the newest
// checkpoint and finishes.
TEST(PipelineTrainTest, AKilledRankOfAThreeDimensionalMeshEndsTheJobAndItResumes) {
  test::TempDir dir;
  test::write_char_tokens(dir.path());
  const std::string marker = "--seed 4345" + std::to_string(test::free_port());
  const std::string save = dir.file("save");
  auto command = [&](int epochs, const std::string& extra) {
    return ddpx("run 8 --grace_s 2 --log_dir " + dir.file("logs") +
                " -- train --model gpt-nano --dataset tokens --data_dir " + dir.path() +
                " --seq_len 32 --vocab_size 77 --batch_size 8 --optimizer adamw --num_epochs " +
                std::to_string(epochs) +
                " --limit_train_batches 1 --limit_test_batches 1 --log_every 1000 --threads 1 "
                "--pipeline_parallel 2 --tensor_parallel 2 --shard full --no_progress "
                "--save_dir " +
                save + " " + extra + " " + marker);
  };
  const std::string pattern = "[-]" + marker.substr(1);
  // Rank 5 (replica 1's first stage, tensor rank 1) is killed once two epochs are saved.
  const std::string killer = "( for i in $(seq 1 900); do if [ -e " +
                             train::checkpoint_path(save, 2) +
                             " ]; then sleep 0.5; for p in $(pgrep -f -- '" + pattern +
                             "'); do if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx "
                             "RANK=5; then kill -KILL $p; date +%s%N > " +
                             dir.file("killed_at") + "; exit 0; fi; done; fi; sleep 0.2; done ) & ";
  auto killed = run_command(killer + command(100000, ""), 300);
  const auto ended = std::chrono::system_clock::now();
  EXPECT_FALSE(killed.timed_out) << killed.output;
  std::ifstream killed_at(dir.file("killed_at"));
  int64_t killed_ns = 0;
  ASSERT_TRUE(killed_at >> killed_ns) << "rank 5 was never killed: " << killed.output;
  const double seconds =
      (std::chrono::duration_cast<std::chrono::nanoseconds>(ended.time_since_epoch()).count() -
       killed_ns) /
      1e9;
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_TRUE(std::regex_search(killed.output, std::regex("rank 5 .*(killed|signal|SIGKILL)")))
      << killed.output;
  EXPECT_EQ(run_command("pgrep -f -- '" + pattern + "'", 10).output, "") << "no orphans";
  // The newest checkpoint's epochs: --keep_checkpoints prunes the oldest, and on a quiet machine
  // more one-step epochs end between the second checkpoint and the kill than it keeps.
  int64_t saved = 0;
  for (int64_t epochs = 1; epochs <= 100000; ++epochs)
    if (std::filesystem::exists(train::checkpoint_path(save, epochs))) saved = epochs;
  ASSERT_GE(saved, 2) << killed.output;
  EXPECT_LT(seconds, 30) << "the job ended " << seconds << " s after the kill: " << killed.output;

  auto resumed = run_command(command(static_cast<int>(saved) + 1, "--resume auto"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("after " + std::to_string(saved) + " epochs"), std::string::npos)
      << resumed.output;
  EXPECT_TRUE(std::filesystem::exists(train::checkpoint_path(save, saved + 1))) << resumed.output;
}

// How many events named `name` the traces of `--profile DIR` hold, every rank's together.
int events_in_traces(const std::string& dir, const std::string& name) {
  int n = 0;
  const std::string quoted = "\"" + name + "\"";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1))
      ++n;
  }
  return n;
}

const std::string kCheckpointNode =
    "torch::autograd::CppNode<ddpx::models::(anonymous namespace)::Checkpoint>";

// Recomputing blocks in backward changes no number: DDP on two workers, a two-stage pipeline and
// ZeRO-2 end with the weights they reach without it, and a ResNet (BatchNorm) prints the same
// losses. That the blocks were recomputed (a no-op would give the same numbers) is read from
// the profiler's traces of two steps: the Checkpoint nodes ran in backward, and each ran its
// block's forward again, one more Linear (aten::addmm) or the block's convolutions each.
TEST(ActivationCheckpointingTrainTest, DdpAPipelineAndAResNetTrainAsWithoutIt) {
  test::TempDir dir;
  for (const std::string& layout : {std::string(""), std::string("--pipeline_parallel 2 "),
                                    std::string("--shard gradients ")}) {
    std::string saves[2];
    int linears[2] = {0, 0}, recomputes[2] = {0, 0};
    for (const std::string& policy : {std::string("none"), std::string("blocks")}) {
      const std::string save = dir.file(policy + (layout.empty()     ? "ddp"
                                                  : layout[2] == 'p' ? "pipe"
                                                                     : "zero2"));
      auto r = run_command(
          ddpx("run 2 --log_dir " + dir.file("l" + policy) + " -- " + kMlp + "--num_epochs 1 " +
               layout + "--activation_checkpointing " + policy + " --save_dir " + save +
               " --profile " + save + ".trace --profile_skip 0 --profile_steps 2"),
          300);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      if (policy == "blocks") {
        EXPECT_NE(r.output.find("activation checkpointing: blocks"), std::string::npos) << r.output;
      }
      saves[policy == "blocks"] = train::checkpoint_path(save, 1);
      linears[policy == "blocks"] = events_in_traces(save + ".trace", "aten::addmm");
      recomputes[policy == "blocks"] = events_in_traces(save + ".trace", kCheckpointNode);
    }
    EXPECT_EQ(recomputes[0], 0) << layout;
    EXPECT_GT(recomputes[1], 0) << layout << "the blocks recompute in backward";
    EXPECT_EQ(linears[1] - linears[0], recomputes[1]) << layout << "each recomputed its Linear";
    auto a = weights_of(saves[0]), b = weights_of(saves[1]);
    for (const auto& [name, value] : a)
      EXPECT_TRUE(torch::equal(value, b.at(name))) << layout << name;
  }
  std::vector<double> losses[2];
  int convolutions[2] = {0, 0}, recomputes[2] = {0, 0};
  for (const std::string& policy : {std::string("none"), std::string("every:2")}) {
    const std::string trace = dir.file("resnet-" + policy);
    auto r = run_command(
        ddpx("train --model resnet18 --dataset synthetic --synthetic_size 32 --synthetic_image 32 "
             "--image_size 32 --batch_size 8 --num_epochs 2 --threads 1 --limit_test_batches 1 "
             "--profile " +
             trace +
             " --profile_skip 0 --profile_steps 2 "
             "--activation_checkpointing " +
             policy),
        300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    losses[policy != "none"] = numbers_after(r.output, "loss_train");
    convolutions[policy != "none"] = events_in_traces(trace, "aten::convolution");
    recomputes[policy != "none"] = events_in_traces(trace, kCheckpointNode);
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[0].size(), 2u);
  // every:2 of the 8 blocks: blocks 1, 3, 5, 7 (2 or 3 convolutions each) in each of 2 steps.
  EXPECT_EQ(recomputes[0], 0);
  EXPECT_GT(recomputes[1], 0);
  EXPECT_GE(convolutions[1] - convolutions[0], 2 * recomputes[1])
      << "the blocks' convolutions ran again";
  // ddpx plan probes the model as train wraps it: fewer activation bytes with the blocks
  // recomputed (at 128 px and 16 images: 129 MB and 81 MB when this was written; at 64 px and 4
  // images the recompute's own temporaries outweigh what it saves).
  double activations[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    auto plan = run_command(ddpx(std::string("plan --model resnet18 --gpus 1 --batch_size 16 "
                                             "--image_size 128 --num_classes 10 --json "
                                             "--activation_checkpointing ") +
                                 (i ? "blocks" : "none")),
                            120);
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(plan.output, m, std::regex(R"("activation_bytes": ([0-9]+))")))
        << plan.output;
    activations[i] = std::stod(m[1]);
  }
  EXPECT_LT(activations[1], 0.8 * activations[0]);
}

}  // namespace
}  // namespace ddpx
