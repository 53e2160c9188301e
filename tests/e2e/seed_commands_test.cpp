// The original tool's commands, as it prints them, run the original's workload: in a folder laid
// out as the original leaves it (./data with CIFAR written by Python's pickle), each command is
// run literally through this repository's run-ddp.sh, shortened only by the environment
// (DDPX_EPOCHS and the like, which the header names). Asserts the original's log lines (the
// dataset, the input size, every rank's hello, the loader workers), a finished epoch and test
// accuracy; where the data is missing, the message names the download to run. `ddpx train` alone
// keeps Fashion-MNIST, and names it; a model that needs another size is resized, and says so.
#include <gtest/gtest.h>

#include <string>

#include "e2e/seed_fixture.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::SeedData;

using test::has;

// What every finished seed run prints: both ranks' hellos, the loader choice, the limits it
// honoured, one epoch and the test accuracy.
void expect_seed_run(const test::CommandResult& r) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "Hello from local_rank 0, global_rank 0\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Hello from local_rank 1, global_rank 1\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Auto-detected num_workers: ")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "limits from the environment: DDPX_EPOCHS=1 (--num_epochs 1) | DDPX_MAX_STEPS=1 "
                  "(train batches per epoch <= 1) | DDPX_MAX_TEST_BATCHES=1 (test batches <= 1) | "
                  "DDPX_BATCH_SIZE=2 (--batch_size 2 --eval_batch_size 2)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "world size 2 (")) << r.output;
  EXPECT_TRUE(has(r.output, "Epoch - 0/1: time - ")) << r.output;
  EXPECT_TRUE(has(r.output, "Accuracy on test dataset - ")) << r.output;
}

TEST(SeedCommandsTest, ResNet101CommandTrainsCifar100At224FromData) {
  test::TempDir dir;
  write_seed_data(dir.path(), SeedData::kCifar100);
  auto r = test::run_seed_command(dir.path(),
                                  "./run-ddp.sh 2 script_single_node \"--model resnet101 "
                                  "--learning_rate 0.002 --optimizer sgd --batch_size 1024 "
                                  "--num_epochs 10\"");
  expect_seed_run(r);
  EXPECT_TRUE(has(r.output, "Training resnet101 on cifar100 dataset\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Input size: 224x224, Classes: 100\n")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "dataset cifar100 from data/cifar-100-python (16 train / 8 test, "
                  "32x32x3 -> 3x224x224, 100 classes)"))
      << r.output;
  EXPECT_TRUE(has(r.output,
                  "images resized from 32x32 to 224x224: resnet101's input size "
                  "(--image_size model)"))
      << r.output;
}

TEST(SeedCommandsTest, Cifar10CommandReadsTheOriginalsDataFolder) {
  test::TempDir dir;
  write_seed_data(dir.path(), SeedData::kCifar10);
  auto r = test::run_seed_command(dir.path(),
                                  "./run-ddp.sh 2 script_single_node \"--model resnet18 "
                                  "--dataset cifar10 --learning_rate 0.002 --optimizer sgd "
                                  "--batch_size 1024 --num_epochs 10\"");
  expect_seed_run(r);
  EXPECT_TRUE(has(r.output, "Training resnet18 on cifar10 dataset\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Input size: 224x224, Classes: 10\n")) << r.output;
  EXPECT_TRUE(has(r.output, "dataset cifar10 from data/cifar-10-batches-py (")) << r.output;
}

TEST(SeedCommandsTest, VitBaseCommandTrainsAtItsPatchSize) {
  test::TempDir dir;
  write_seed_data(dir.path(), SeedData::kCifar100);
  auto r = test::run_seed_command(
      dir.path(),
      "./run-ddp.sh 2 script_single_node \"--model vit_base_patch16_224 --learning_rate 0.0001 "
      "--optimizer adamw --weight_decay 0.05 --batch_size 128 --num_epochs 10\"");
  expect_seed_run(r);
  EXPECT_TRUE(has(r.output, "Training vit_base_patch16_224 on cifar100 dataset\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Input size: 224x224, Classes: 100\n")) << r.output;
}

// The archive alone (as the original's download leaves it before unpacking) is found and
// unpacked in ./data; with no data at all, the message names the original's download.
TEST(SeedCommandsTest, ArchiveAloneIsUnpackedAndMissingDataNamesTheDownload) {
  test::TempDir dir;
  write_seed_data(dir.path(), SeedData::kCifar100Archive);
  auto info = test::run_seed_command(dir.path(), "ddpx data info cifar100");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_TRUE(has(info.output,
                  "cifar100: train 16 test 8 images of 32x32x3, 100 classes, from "
                  "data/cifar-100-python\n"))
      << info.output;

  test::TempDir empty;
  auto r = test::run_seed_command(
      empty.path(), "./run-ddp.sh 2 script_single_node \"--model resnet101 --num_epochs 10\"");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "run `ddpx data download cifar100 --data_dir data`")) << r.output;
  EXPECT_FALSE(has(r.output, "Epoch - ")) << r.output;
}

// `ddpx train` alone: the embedded Fashion-MNIST, named with its folder; ViT and VGG on its
// 28-px images are resized to the size they take, and the header says why.
TEST(SeedCommandsTest, TrainAloneKeepsFashionMnistAndFitsModelsThatNeedASize) {
  test::TempDir dir;
  auto r = test::run_seed_command(dir.path(), "ddpx train --no_progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "Training resnet18 on fashion-mnist dataset\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Input size: 28x28, Classes: 10\n")) << r.output;
  EXPECT_TRUE(has(r.output, "dataset fashion-mnist from " + test::fashion_mnist_dir())) << r.output;
  EXPECT_FALSE(has(r.output, "images resized")) << r.output;

  for (const char* model : {"vit_b_16", "vgg11"}) {
    auto fitted = test::run_seed_command(dir.path(),
                                         std::string("ddpx train --no_progress --model ") + model);
    ASSERT_EQ(fitted.exit_code, 0) << fitted.output;
    EXPECT_TRUE(has(fitted.output, "Input size: 32x32, Classes: 10\n")) << fitted.output;
    EXPECT_TRUE(has(fitted.output,
                    "images resized from 28x28 to 32x32: " + std::string(model) +
                        (model == std::string("vgg11") ? " takes at least 32 px"
                                                       : " takes multiples of its 16-px patch")))
        << fitted.output;
  }
  auto refused = test::run_seed_command(dir.path(), "ddpx train --model vit_b_16 --image_size 40");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(has(refused.output,
                  "--image_size 40: vit_b_16 takes multiples of its 16-px "
                  "patch; give --image_size 48"))
      << refused.output;
}

TEST(SeedCommandsTest, ABadLimitInTheEnvironmentIsNamed) {
  test::TempDir dir;
  auto r = test::run_command("cd " + test::shell_quote(dir.path()) + " && DDPX_EPOCHS=ten " +
                                 test::ddpx_command("train --dataset synthetic"),
                             60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "environment variable DDPX_EPOCHS='ten' is not a whole number >= 1"))
      << r.output;
}

}  // namespace
}  // namespace ddpx
