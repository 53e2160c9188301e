// `ddpx train --dataset imagefolder` and `ddpx data info DIR` as a user runs them, on a folder of
// real photographs (scikit-image's, cut into crops and re-encoded by cjpeg and PIL at test time):
// a small ResNet learns the four classes well above chance in a few seconds, the folder's index
// is cached, and a broken file stops the run before training with one line naming it, or with
// --bad_images skip is left out and named.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::has;
using test::run_command;

TEST(ImageFolderTrainTest, ResNetLearnsAFolderOfPhotosAboveChance) {
  test::PhotoFolder dir(24);
  const std::string root = dir.root();
  // CIFAR's ResNet-20 at 32 px: 72 training crops of 4 photographs, 24 validation crops.
  auto r = run_command(ddpx("train --model resnet20 --dataset imagefolder --data_dir " + root +
                            " --num_epochs 5 --val_split 0.25 --batch_size 16 --optimizer adamw "
                            "--learning_rate 0.004 --seed 1 --loader_workers 2"),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "dataset imagefolder from " + root + " (0.25 held out")) << r.output;
  EXPECT_TRUE(has(r.output, "(72 train / 24 test,")) << r.output;
  EXPECT_GT(test::printed_test_accuracy(r.output), 0.5) << "4 classes: chance is 0.25\n"
                                                        << r.output;
  EXPECT_TRUE(std::filesystem::exists(root + "/.ddpx-index"));

  // `data info` reads the index from its cache and lists the classes and formats.
  r = run_command(ddpx("data info " + root), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, root + ": 4 classes, 96 images")) << r.output;
  EXPECT_TRUE(has(r.output, "(from its cache)")) << r.output;
  EXPECT_TRUE(has(r.output, "astronaut  24")) << r.output;
  EXPECT_TRUE(has(r.output, "formats: jpeg 84, png 12")) << r.output;
  EXPECT_TRUE(has(r.output, "unreadable: 0")) << r.output;
}

TEST(ImageFolderTrainTest, ABrokenFileStopsTheRunBeforeTrainingNamingIt) {
  test::PhotoFolder dir(3);
  const std::string root = dir.root();
  const std::string broken = root + "/coffee/coffee_001.JPG";
  ASSERT_TRUE(std::filesystem::exists(broken));
  test::write_bytes(broken, "\xFF\xD8\xFF\xE0 cut short");
  auto r = run_command(ddpx("train --model resnet20 --dataset imagefolder --data_dir " + root +
                            " --num_epochs 1 --val_split 0.3"),
                       120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "1 of 12 files in " + root + " cannot be read; the first: " + broken +
                                ": corrupt or truncated JPEG"))
      << r.output;
  EXPECT_FALSE(has(r.output, "Epoch - ")) << r.output;

  r = run_command(ddpx("data info " + root), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "unreadable: 1\n  " + broken + ": corrupt or truncated JPEG"))
      << r.output;

  r = run_command(ddpx("data info " + dir.file("nowhere")), 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "neither a dataset")) << r.output;
}

TEST(ImageFolderTrainTest, SkipTrainsWithoutABrokenFile) {
  test::PhotoFolder dir(3);
  const std::string root = dir.root();
  const std::string broken = root + "/coffee/coffee_001.JPG";
  ASSERT_TRUE(std::filesystem::exists(broken));
  test::write_bytes(broken, "\xFF\xD8\xFF\xE0 cut short");
  auto r = run_command(ddpx("train --model resnet20 --dataset imagefolder --data_dir " + root +
                            " --num_epochs 1 --val_split 0.3 --image_size 32 --batch_size 4 "
                            "--bad_images skip"),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "1 of 12 files in " + root +
                      " cannot be read and are left out (--bad_images skip); the first: " + broken +
                      ": corrupt or truncated JPEG"))
      << r.output;
  EXPECT_TRUE(has(r.output, "(8 train / 3 test,") || has(r.output, "(9 train / 2 test,"))
      << "11 readable files" << r.output;
  EXPECT_TRUE(has(r.output, "Accuracy on test dataset")) << r.output;
}

}  // namespace
}  // namespace ddpx
