// `ddpx data pack` then `ddpx run 2 -- train --dataset shards` as a user runs them, on a folder
// of real photographs: one sample a shard, so that the 15 training shards cannot split evenly
// over 2 ranks; both ranks still run the same number of steps (an uneven split would hang the
// job on DDP's all-reduce, webdataset#225) over the folder's classes and samples, and the model
// learns. A file that cannot be read stops the packing with one line naming it.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::has;
using test::run_command;

TEST(ShardsTrainTest, TwoRanksTrainOnUnevenShardsPackedFromAFolder) {
  test::PhotoFolder dir(5);
  const std::string root = dir.root(), out = dir.file("shards");
  auto r = run_command(ddpx("data pack " + root + " --out " + out + " --shard_size 1"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "packed 20 images of 4 classes from " + root + " into 20 shard(s)"))
      << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/train-000019.tar"));
  EXPECT_FALSE(std::filesystem::exists(out + "/train-000020.tar"));

  r = run_command(ddpx("run 2 --log_dir " + dir.file("log") +
                       " -- train --model resnet20 --dataset shards --data_dir " + out +
                       " --val_split 0.25 --num_epochs 2 --batch_size 4 --image_size 32 "
                       "--optimizer adamw --learning_rate 0.004 --seed 1 --loader_workers 1 "
                       "--threads 1"),
                  600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "dataset shards from " + out + " (20 shards, 0.25 held out"))
      << r.output;
  // Shards' sizes are not read before training: the header says they vary, and the crop's size.
  EXPECT_TRUE(has(r.output, "(15 train / 5 test, images of varying size -> 3x32x32, 4 classes)"))
      << r.output;
  EXPECT_FALSE(has(r.output, "0x0x3")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "shards: 15 over 2 rank(s), 8 samples each an epoch: every one of the 15 once, "
                  "1 repeated to even the ranks"))
      << r.output;
  EXPECT_TRUE(has(r.output, "Accuracy on test dataset")) << r.output;

  // The same folder's training header: the same split sizes and classes.
  r = run_command(ddpx("train --model resnet20 --dataset imagefolder --data_dir " + root +
                       " --val_split 0.25 --num_epochs 1 --limit_train_batches 1 "
                       "--limit_test_batches 1 --image_size 32"),
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "(15 train / 5 test, images of varying size, median ")) << r.output;
  EXPECT_TRUE(has(r.output, " -> 3x32x32, 4 classes)")) << r.output;
}

TEST(ShardsTrainTest, PackingStopsAtAnUnreadableFileNamingIt) {
  test::PhotoFolder dir(2);
  const std::string root = dir.root();
  const std::string broken = root + "/coffee/coffee_001.JPG";
  ASSERT_TRUE(std::filesystem::exists(broken));
  test::write_bytes(broken, "\xFF\xD8\xFF\xE0 cut short");
  auto r = run_command(ddpx("data pack " + root + " --out " + dir.file("shards")), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, broken + ": corrupt or truncated JPEG")) << r.output;
  EXPECT_TRUE(has(r.output, "remove or convert them, then pack again")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("shards/train-000000.tar")));
}

}  // namespace
}  // namespace ddpx
