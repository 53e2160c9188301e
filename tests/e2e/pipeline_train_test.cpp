// `ddpx run N -- train --pipeline_parallel P` as a user runs it: two stages train the MLP to the
// single process's losses and weights, four workers as 2 stages x 2 replicas to DDP's on two,
// the pipeline's checkpoint resumes in one process where the single process's own run ends, a
// zoo ResNet is cut by timing its layers and the table says so, and layouts or flags that cannot
// go together are refused in one line naming them.
#include <gtest/gtest.h>

#include <map>
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

void expect_same_weights(const std::string& a, const std::string& b) {
  auto wa = weights_of(a), wb = weights_of(b);
  for (const auto& [name, value] : wa) {
    EXPECT_LT((value - wb.at(name)).abs().max().item<double>(), 1e-5) << name;
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
  EXPECT_NE(piped.output.find("plan: pipeline parallel: 2 stages x 1 data-parallel replica "
                              "(gpipe, 4 micro-batches; BatchNorm statistics per micro-batch)"),
            std::string::npos)
      << piped.output;
  auto loss_single = numbers_after(single.output, "loss_train");
  auto loss_piped = numbers_after(piped.output, "loss_train");
  ASSERT_EQ(loss_single.size(), 3u) << single.output;
  ASSERT_EQ(loss_piped.size(), 2u) << piped.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(loss_single[i], loss_piped[i], 1e-4) << "epoch " << i;
  expect_same_weights(train::checkpoint_path(dir.file("single"), 2),
                      train::checkpoint_path(dir.file("piped"), 2));

  // One process resumes the pipeline's checkpoint, optimizer state included, for epoch 3.
  auto resumed = run_command(
      ddpx(kMlp + "--num_epochs 3 --save_dir " + dir.file("piped") + " --resume auto"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_weights(train::checkpoint_path(dir.file("single"), 3),
                      train::checkpoint_path(dir.file("piped"), 3));
}

TEST(PipelineTrainTest, FourWorkersAsTwoStagesTimesTwoReplicasTrainAsTwoDdpWorkers) {
  test::TempDir dir;
  auto ddp = run_command(ddpx("run 2 --log_dir " + dir.file("l1") + " -- " + kMlp +
                              "--num_epochs 2 --save_dir " + dir.file("ddp")),
                         300);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto piped =
      run_command(ddpx("run 4 --log_dir " + dir.file("l2") + " -- " + kMlp +
                       "--num_epochs 2 --pipeline_parallel 2 --save_dir " + dir.file("piped")),
                  300);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_NE(piped.output.find("2 stages x 2 data-parallel replicas (1f1b, 4 micro-batches"),
            std::string::npos)
      << piped.output;
  auto loss_ddp = numbers_after(ddp.output, "loss_train");
  auto loss_piped = numbers_after(piped.output, "loss_train");
  ASSERT_EQ(loss_ddp.size(), 2u) << ddp.output;
  ASSERT_EQ(loss_piped.size(), 2u) << piped.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(loss_ddp[i], loss_piped[i], 1e-4) << "epoch " << i;
  auto acc_ddp = numbers_after(ddp.output, "Accuracy on test dataset");
  auto acc_piped = numbers_after(piped.output, "Accuracy on test dataset");
  ASSERT_EQ(acc_ddp.size(), 2u);
  ASSERT_EQ(acc_piped.size(), 2u);
  EXPECT_NEAR(acc_ddp[1], acc_piped[1], 1e-3);
  expect_same_weights(train::checkpoint_path(dir.file("ddp"), 2),
                      train::checkpoint_path(dir.file("piped"), 2));
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
}

TEST(PipelineTrainTest, LayoutsAndFlagsThatCannotGoTogetherAreRefusedInOneLine) {
  auto sync_bn = run_command(ddpx(kMlp + "--pipeline_parallel 2 --sync_bn"), 60);
  EXPECT_EQ(sync_bn.exit_code, 2) << sync_bn.output;
  EXPECT_NE(sync_bn.output.find("--sync_bn with --pipeline_parallel 2"), std::string::npos)
      << sync_bn.output;
  auto micro = run_command(ddpx(kMlp + "--pipeline_parallel 2 --microbatches 32"), 60);
  EXPECT_EQ(micro.exit_code, 2) << micro.output;
  EXPECT_NE(micro.output.find("--batch_size 16 (per data-parallel replica) cannot make "
                              "--microbatches 32"),
            std::string::npos)
      << micro.output;
  auto odd = run_command(ddpx(kMlp + "--pipeline_parallel 2 --pipeline_schedule interleaved "
                                     "--microbatches 3"),
                         60);
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("3 micro-batches is not a multiple of 2"), std::string::npos)
      << odd.output;
  test::TempDir dir;
  auto world = run_command(
      ddpx("run 3 --log_dir " + dir.file("w") + " -- " + kMlp + "--pipeline_parallel 2"), 120);
  EXPECT_NE(world.exit_code, 0);
  EXPECT_NE(world.output.find("--pipeline_parallel 2 does not divide the world of 3 ranks"),
            std::string::npos)
      << world.output;
  auto deep = run_command(ddpx("run 2 --log_dir " + dir.file("d") + " -- " + kMlp +
                               "--pipeline_parallel 2 --pipeline_schedule interleaved"),
                          120);
  EXPECT_NE(deep.exit_code, 0);
  EXPECT_NE(deep.output.find("mlp has 3 layers a pipeline can cut between, fewer than the 4 "
                             "stages asked for"),
            std::string::npos)
      << deep.output;
}

}  // namespace
}  // namespace ddpx
