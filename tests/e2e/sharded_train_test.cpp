// `ddpx run N -- train --shard ...` as a user runs it: ZeRO-3 on two workers trains the MLP to
// DDP's weights (its own units named with --shard_units), a zoo ResNet shards by its blocks, its
// checkpoint resumes in one process, a lone process is told that nothing is split, flags that
// cannot go together are refused naming both, and a worker killed mid-run ends the job naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::run_command;

std::string ddpx(const std::string& args) { return test::ddpx_binary() + " " + args; }

std::vector<double> numbers_after(const std::string& text, const std::string& label) {
  std::vector<double> out;
  std::regex re(label + R"( - ([0-9.]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

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

  // The sharded checkpoint is a whole one: one process resumes it for a third epoch.
  auto resumed = run_command(
      ddpx("train --model mlp --dataset synthetic --synthetic_size 256 --synthetic_image 8 "
           "--batch_size 32 --no_flip --threads 1 --seed 5 --num_epochs 3 --optimizer sgd "
           "--limit_test_batches 0 --save_dir " +
           dir.file("zero3") + " --resume auto"),
      300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(numbers_after(resumed.output, "loss_train").size(), 1u) << resumed.output;
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
  auto unknown = run_command(ddpx("run 2 --log_dir /tmp/ddpx-shard-test-logs -- " + kMlp +
                                  "--shard full --shard_units fc9"),
                             120);
  EXPECT_NE(unknown.exit_code, 0) << unknown.output;
  EXPECT_NE(unknown.output.find("sharding unit 'fc9' is no submodule of the model"),
            std::string::npos)
      << unknown.output;
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
