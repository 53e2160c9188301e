// run-ddp.sh: the seed's positional forms become the right `ddpx run` command line. A fake
// DDPX_BIN records the arguments it is given; one test runs the real ddpx with --dry_run.
#include <gtest/gtest.h>

#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

using test::run_command;
using test::shell_quote;
using test::TempDir;

// Runs run-ddp.sh with a clean launcher environment plus `env` (e.g. "NODE_RANK=1").
test::CommandResult run_ddp(const std::string& ddpx_bin, const std::string& env,
                            const std::string& args, int timeout_s = 30) {
  std::string script = shell_quote(test::source_dir() + "/run-ddp.sh");
  return run_command(
      "env -u NODE_RANK -u SLURM_NODEID -u SLURM_NNODES -u NNODES -u MASTER_PORT "
      "-u DDPX_RUN_ARGS DDPX_BIN=" +
          shell_quote(ddpx_bin) + " " + env + " " + script + " " + args,
      timeout_s);
}

class RunDdpShTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = write_script(dir_, "fake_ddpx",
                         "printf '%s\\n' \"$@\" > " + shell_quote(dir_.file("args")) + "\n");
  }
  std::string args() const { return slurp(dir_.file("args")); }
  TempDir dir_;
  std::string fake_;
};

TEST_F(RunDdpShTest, SingleNodeFormRunsDdpxTrain) {
  auto result = run_ddp(fake_, "", "2 script_single_node \"--model resnet18 --epochs 2\"");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(args(),
            "run\n2\n--\ntrain\n--dataset\ncifar100\n--image_size\nmodel\n--model\nresnet18\n--"
            "epochs\n2\n");
}

TEST_F(RunDdpShTest, MultiNodeFormTakesNodeRankAndPortFromTheEnvironment) {
  auto result = run_ddp(fake_, "NODE_RANK=1 MASTER_PORT=29600",
                        "4 2 10.1.2.3 script_multi_node \"--epochs 1\"");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(args(),
            "run\n4\n--nnodes\n2\n--node_rank\n1\n--master_addr\n10.1.2.3\n--master_port\n"
            "29600\n--\ntrain\n--dataset\ncifar100\n--image_size\nmodel\n--epochs\n1\n");
}

// `auto` with no Slurm or NNODES: the node count and this node's rank are settled at the
// rendezvous (the identical command on every node); NODE_RANK alone still names the rank.
TEST_F(RunDdpShTest, AutoNodesComeFromSlurmThenTheRendezvous) {
  auto slurm = run_ddp(fake_, "SLURM_NNODES=3 SLURM_NODEID=2",
                       "8 auto 192.168.1.100 script_multi_node \"--epochs 1\"");
  ASSERT_EQ(slurm.exit_code, 0) << slurm.output;
  EXPECT_EQ(
      args(),
      "run\n8\n--nnodes\n3\n--node_rank\n2\n--master_addr\n192.168.1.100\n"
      "--master_port\n29500\n--\ntrain\n--dataset\ncifar100\n--image_size\nmodel\n--epochs\n1\n");
  auto alone = run_ddp(fake_, "", "8 auto 192.168.1.100 script_multi_node");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_EQ(args(),
            "run\n8\n--nnodes\nauto\n--master_addr\n192.168.1.100\n"
            "--master_port\n29500\n--\ntrain\n--dataset\ncifar100\n--image_size\nmodel\n");
  auto counted = run_ddp(fake_, "NNODES=2", "8 auto 192.168.1.100 script_multi_node");
  ASSERT_EQ(counted.exit_code, 0) << counted.output;
  EXPECT_EQ(args(),
            "run\n8\n--nnodes\n2\n--master_addr\n192.168.1.100\n"
            "--master_port\n29500\n--\ntrain\n--dataset\ncifar100\n--image_size\nmodel\n");
}

TEST_F(RunDdpShTest, OtherScriptIsRunAsTheProgram) {
  auto result = run_ddp(fake_, "DDPX_RUN_ARGS='--tee all'", "2 ./my_trainer.sh \"a b\"");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(args(), "run\n2\n--tee\nall\n--\n./my_trainer.sh\na\nb\n");
}

TEST_F(RunDdpShTest, InteractiveModeOpensADdpxShellAndBadFormsExitTwo) {
  auto result = run_ddp(fake_, "", "2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(args(), "shell\n2\n");
  auto help = run_ddp(fake_, "", "--help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_TRUE(contains(help.output, "script_multi_node")) << help.output;
  auto bad = run_ddp(fake_, "", "two script_single_node");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

TEST_F(RunDdpShTest, RealLauncherDryRunShowsTheWorkers) {
  auto result = run_ddp(test::ddpx_binary(), "DDPX_RUN_ARGS=--dry_run",
                        "2 script_single_node \"--epochs 1\"");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2"))
      << result.output;
  EXPECT_TRUE(
      contains(result.output,
               test::ddpx_binary() + " train --dataset cifar100 --image_size model --epochs 1\n"))
      << result.output;
}

// The seed's own command line (ResNet-101, SGD 0.002, images in [-1, 1]) through run-ddp.sh with
// the real ddpx: two workers train on CPU with small limits and rank 0 prints the seed's lines
// once, for a world of 2.
TEST_F(RunDdpShTest, SeedCommandTrainsWithTwoRealWorkers) {
  auto result =
      run_ddp(test::ddpx_binary(), "DDPX_RUN_ARGS=" + shell_quote("--log_dir " + dir_.file("logs")),
              "2 script_single_node \"--dataset fashion-mnist --image_size 28 --model resnet101 "
              "--learning_rate 0.002 --optimizer sgd "
              "--batch_size 4 --normalize neg_one_one --num_epochs 1 --limit_train_batches 1 "
              "--limit_test_batches 1 --threads 1 --no_progress\"",
              300);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "world size 2")) << result.output;
  EXPECT_TRUE(contains(result.output, "global batch 8")) << result.output;
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = result.output.find(what); at != std::string::npos;
         at = result.output.find(what, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("loss_train - "), 1u) << "rank 0 prints the seed's lines once\n" << result.output;
  EXPECT_EQ(count("Accuracy on test dataset - "), 1u) << result.output;
}

}  // namespace
}  // namespace ddpx::launch::testing
