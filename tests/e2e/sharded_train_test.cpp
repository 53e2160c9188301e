// `ddpx run N -- train --shard ...` as a user runs it: ZeRO-3 on two workers trains the MLP to
// DDP's weights (its own units named with --shard_units), a zoo ResNet shards by its blocks, its
// checkpoint resumes in one process and at 3 and 4 ranks to the weights of the run that was never
// interrupted, a lone process is told that nothing is split, flags that
// cannot go together are refused naming both, and a worker killed mid-run ends the job naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "e2e/refused_job.h"
#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::numbers_after;
using test::run_command;

using test::ddpx;

const std::string kMlpData =
    "train --model mlp --dataset synthetic --synthetic_size 256 --synthetic_image 8 "
    "--batch_size 16 --no_flip --threads 1 --seed 5 --learning_rate 0.05 --limit_test_batches 0 ";
const std::string kMlp = kMlpData + "--num_epochs 2 --optimizer sgd ";

TEST(ShardedTrainTest, ZeroThreeOnTwoWorkersTrainsToDdpsWeights) {
  test::TempDir dir;
  auto ddp = run_command(
      ddpx("run 2 --log_dir " + dir.file("l1") + " -- " + kMlp + "--save_dir " + dir.file("ddp")),
      300);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto zero3 =
      run_command(ddpx("run 2 --log_dir " + dir.file("l2") + " -- " + kMlp +
                       "--shard full --shard_units fc1,fc2,fc3 --save_dir " + dir.file("zero3")),
                  300);
  ASSERT_EQ(zero3.exit_code, 0) << zero3.output;
  EXPECT_NE(zero3.output.find("plan: sharded data parallel over 2 ranks (--shard full, ZeRO-3: "
                              "parameters, gradients and optimizer state split in 3 units)"),
            std::string::npos)
      << zero3.output;

  auto loss_ddp = numbers_after(ddp.output, "loss_train");
  auto loss_zero3 = numbers_after(zero3.output, "loss_train");
  ASSERT_EQ(loss_ddp.size(), 2u) << ddp.output;
  ASSERT_EQ(loss_zero3.size(), 2u) << zero3.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(loss_ddp[i], loss_zero3[i], 1e-4) << "epoch " << i;

  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  auto a = models::create_model("mlp", config);
  auto b = models::create_model("mlp", config);
  train::load_checkpoint_weights(train::checkpoint_path(dir.file("ddp"), 2), *a.ptr());
  train::load_checkpoint_weights(train::checkpoint_path(dir.file("zero3"), 2), *b.ptr());
  auto pb = b.ptr()->named_parameters();
  for (const auto& item : a.ptr()->named_parameters()) {
    double diff = (item.value() - pb[item.key()]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << item.key();
  }

  // Interrupted after epoch 1 and resumed in one process at the same global batch (32 = 2 x 16)
  // from the sharded checkpoint (each rank's part): the second epoch ends where the uninterrupted
  // run did, its loss to the printed digit and its weights within 1e-5 (one process sums the 32
  // samples in another order than two ranks' 16 averaged: rounding, where a lost schedule step,
  // momentum or shard moves them by the update itself, 1e-3 and more).
  auto resumed =
      run_command(ddpx(std::regex_replace(kMlp, std::regex("--batch_size 16"), "--batch_size 32") +
                       "--resume " + train::checkpoint_path(dir.file("zero3"), 1) + " --save_dir " +
                       dir.file("resumed")),
                  300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("world size 1"), std::string::npos) << resumed.output;
  const auto loss_resumed = numbers_after(resumed.output, "loss_train");
  ASSERT_EQ(loss_resumed.size(), 1u) << resumed.output;
  EXPECT_NEAR(loss_resumed[0], loss_ddp[1], 1e-4) << resumed.output;
  auto c = models::create_model("mlp", config);
  train::load_checkpoint_weights(train::checkpoint_path(dir.file("resumed"), 2), *c.ptr());
  auto pc = c.ptr()->named_parameters();
  for (const auto& item : a.ptr()->named_parameters()) {
    double diff = (item.value() - pc[item.key()]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << item.key() << " resumed in one process";
  }
}

// The final weights of a checkpoint's run, by name.
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

// Each rank writes its part (AdamW's moments included) and rank 0 the index. A run interrupted
// after epoch 2 (its epoch-2 checkpoint) resumes at 3 ranks under ZeRO-2 and at 4 under ZeRO-1,
// from the sharded folder and from the whole file, and ends epoch 3 where the uninterrupted
// 2-rank run did: the same global batch of 48 (--batch_size_scaled) and 240 samples, 5 steps an
// epoch at every world size; the loss to the printed digit and the weights within 1e-5 (other
// ranks sum the batch in another order). A damaged part is named, and --resume auto falls back
// past it.
TEST(ShardedTrainTest, ShardedCheckpointsResumeAtAnyWorldSizeToTheUninterruptedRun) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string adamw =
      "train --model mlp --dataset synthetic --synthetic_size 240 --synthetic_image 8 "
      "--batch_size 48 --batch_size_scaled --no_flip --threads 1 --seed 5 --learning_rate 0.01 "
      "--limit_test_batches 0 --optimizer adamw --num_epochs 3 ";
  std::map<std::string, std::vector<double>> uninterrupted_loss;
  for (const std::string format : {"auto", "whole"}) {
    auto r = run_command(
        ddpx("run 2 --log_dir " + dir.file("l" + format) + " -- " + adamw +
             "--shard full --checkpoint_format " + format + " --save_dir " + dir.file(format)),
        300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    uninterrupted_loss[format] = numbers_after(r.output, "loss_train");
    ASSERT_EQ(uninterrupted_loss[format].size(), 3u) << r.output;
  }
  const std::string sharded = train::checkpoint_path(dir.file("auto"), 2);
  const std::string whole = train::checkpoint_path(dir.file("whole"), 2);
  ASSERT_TRUE(fs::is_directory(sharded)) << "--shard full on 2 ranks writes a folder";
  for (const char* file : {"index.ddpx", "rank00000-of-00002.ddpx", "rank00001-of-00002.ddpx"})
    EXPECT_TRUE(fs::is_regular_file(sharded + "/" + file)) << file;
  EXPECT_FALSE(fs::exists(sharded + ".partial")) << "the folder was renamed into place";
  ASSERT_TRUE(fs::is_regular_file(whole)) << "--checkpoint_format whole writes one file";

  const auto a = weights_of(sharded);
  const auto b = weights_of(whole);
  for (const auto& [name, value] : a) {
    EXPECT_TRUE(torch::equal(value, b.at(name))) << name << ": the parts hold the whole";
  }
  const auto uninterrupted = weights_of(train::checkpoint_path(dir.file("whole"), 3));

  // Epoch 3 again, resumed at other world sizes and shard modes from each format.
  for (const auto& [ranks, shard] :
       std::vector<std::pair<int, std::string>>{{3, "gradients"}, {4, "optimizer"}}) {
    for (const std::string format : {"auto", "whole"}) {
      const std::string out = dir.file(format + std::to_string(ranks));
      fs::create_directories(out);
      fs::copy(train::checkpoint_path(dir.file(format), 2), train::checkpoint_path(out, 2),
               fs::copy_options::recursive);
      auto r = run_command(
          ddpx("run " + std::to_string(ranks) + " --log_dir " +
               dir.file("r" + format + std::to_string(ranks)) + " -- " + adamw + "--shard " +
               shard + " --checkpoint_format whole --resume auto --save_dir " + out),
          300);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
      const auto loss = numbers_after(r.output, "loss_train");
      ASSERT_EQ(loss.size(), 1u) << r.output;
      EXPECT_NEAR(loss[0], uninterrupted_loss[format][2], 1e-4)
          << "epoch 3 at " << ranks << " ranks from the " << format << " checkpoint";
      for (const auto& [name, value] : weights_of(train::checkpoint_path(out, 3))) {
        const double diff = (value - uninterrupted.at(name)).abs().max().item<double>();
        EXPECT_LT(diff, 1e-5) << name << " after resuming at " << ranks << " ranks, --shard "
                              << shard << ", from the " << format << " checkpoint";
      }
    }
  }

  // A damaged part of the newest checkpoint (epoch 3's): named when asked for; --resume auto
  // goes back to the epoch before.
  const std::string newest = train::checkpoint_path(dir.file("auto"), 3);
  {
    const std::string part = newest + "/rank00001-of-00002.ddpx";
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(part) / 2));
    f.put('\x5a');
  }
  auto named =
      run_command(ddpx(adamw + "--resume " + newest + " --save_dir " + dir.file("x")), 120);
  EXPECT_EQ(named.exit_code, 1) << named.output;
  EXPECT_NE(named.output.find("rank00001-of-00002.ddpx is corrupt (CRC-32 mismatch)"),
            std::string::npos)
      << named.output;
  auto fallback = run_command(ddpx("run 2 --log_dir " + dir.file("lf") + " -- " + adamw +
                                   "--shard full --resume auto --save_dir " + dir.file("auto")),
                              300);
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_NE(fallback.output.find("skipping checkpoint"), std::string::npos) << fallback.output;
  EXPECT_NE(fallback.output.find("resumed from " + train::checkpoint_path(dir.file("auto"), 2)),
            std::string::npos)
      << fallback.output;
}

// --shard_gather_dtype bf16 (auto with --amp bf16): the start-up line says so, and the losses
// follow the fp32 gathers' to bf16's rounding of the weights.
TEST(ShardedTrainTest, Bf16AllGathersTrainAsFp32OnesDo) {
  test::TempDir dir;
  std::map<std::string, std::vector<double>> losses;
  for (const std::string gather : {"fp32", "bf16"}) {
    auto r = run_command(ddpx("run 2 --log_dir " + dir.file(gather) + " -- " + kMlp +
                              "--shard full --shard_gather_dtype " + gather),
                         300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("all-gathers in BFloat16") != std::string::npos, gather == "bf16")
        << r.output;
    losses[gather] = numbers_after(r.output, "loss_train");
    ASSERT_EQ(losses[gather].size(), 2u) << r.output;
  }
  for (size_t i = 0; i < 2; ++i)
    EXPECT_NEAR(losses["bf16"][i], losses["fp32"][i], 0.02) << "epoch " << i;
  auto refused = run_command(ddpx(kMlp + "--shard_gather_dtype bf16"), 60);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--shard_gather_dtype bf16 sets what a sharded plan's all-gathers "
                                "send: add --shard full"),
            std::string::npos)
      << refused.output;
}

TEST(ShardedTrainTest, AZooResNetShardsByItsBlocks) {
  test::TempDir dir;
  auto r = run_command(ddpx("run 2 --log_dir " + dir.path() +
                            " -- train --model resnet18 --dataset fashion-mnist --num_epochs 1 "
                            "--batch_size 16 --limit_train_batches 3 --limit_test_batches 1 "
                            "--shard full --optimizer adamw --clip_grad_norm 1"),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // layer1.0 ... layer4.1 (8 blocks) and the root (conv1, bn1, fc).
  EXPECT_NE(r.output.find("(--shard full, ZeRO-3: parameters, gradients and optimizer state "
                          "split in 9 units)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(numbers_after(r.output, "Accuracy on test dataset").size(), 1u) << r.output;
}

TEST(ShardedTrainTest, OneProcessIsToldNothingIsSplit) {
  auto r = run_command(ddpx(kMlpData + "--num_epochs 1 --shard gradients"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(--shard gradients on one process: nothing to split)"),
            std::string::npos)
      << r.output;
}

TEST(ShardedTrainTest, FlagsThatCannotGoTogetherAreRefusedNamingBoth) {
  auto hook = run_command(ddpx(kMlp + "--shard full --comm_hook bf16"), 60);
  EXPECT_EQ(hook.exit_code, 2) << hook.output;
  EXPECT_NE(hook.output.find("--comm_hook bf16"), std::string::npos) << hook.output;
  EXPECT_NE(hook.output.find("--shard full"), std::string::npos) << hook.output;
  auto lars = run_command(ddpx(kMlpData + "--shard optimizer --optimizer lars"), 60);
  EXPECT_EQ(lars.exit_code, 2) << lars.output;
  EXPECT_NE(lars.output.find("--optimizer lars"), std::string::npos) << lars.output;
  auto units = run_command(ddpx(kMlp + "--shard_units fc1"), 60);
  EXPECT_EQ(units.exit_code, 2) << units.output;
  EXPECT_NE(units.output.find("add --shard full"), std::string::npos) << units.output;
  // Known once the job has joined: refused by every rank before the plan's first collective
  // (the units are resolved before rank 0's parameters are broadcast).
  test::expect_job_refused_before_any_collective(
      2, kMlp + "--shard full --shard_units fc9",
      {"sharding unit 'fc9' is no submodule of the model"});
}

// A worker killed while the others gather parameters: the job ends within seconds, naming it.
TEST(ShardedTrainTest, AKilledWorkerEndsTheJobNamingIt) {
  test::TempDir dir;
  const std::string marker = "--seed 4343" + std::to_string(test::free_port());
  std::string command = ddpx("run 2 --grace_s 2 --log_dir " + dir.path() +
                             " -- train --model mlp --dataset synthetic --synthetic_size 200000 "
                             "--synthetic_image 8 --batch_size 16 --num_epochs 1 --shard full "
                             "--shard_units fc1,fc2,fc3 " +
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
  EXPECT_LT(seconds, 90) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("rank 1 .*(killed|signal|SIGKILL)")))
      << r.output;
  EXPECT_EQ(run_command("pgrep -f -- '" + pattern + "'", 10).output, "") << "no orphans";
}

}  // namespace
}  // namespace ddpx
