// `ddpx train --ema_decay` as a user runs it under the layouts that split the model: ZeRO-3
// (`ddpx run 2 -- train --shard full`), a pipeline of two stages and tensor parallelism over two
// ranks each end two epochs with the average of the weights the one process has on the same
// global batch of 32, read from their checkpoints; and the ZeRO-3 run resumed from its epoch-1
// checkpoint ends with the average of the run that was never interrupted.
//
// Tolerance: 1e-5 absolute on each weight of the average: the ranks sum their halves of the
// batch (or a pipeline its micro-batches) in another order than the one process does, and two
// epochs of SGD carry the last bits on; a lost update or a stale stage moves it by 1e-3 and more.
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <map>
#include <string>

#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;

const std::string kRun =
    "train --model mlp --dataset synthetic --synthetic_size 128 --synthetic_image 8 --no_flip "
    "--threads 1 --seed 5 --learning_rate 0.05 --optimizer sgd --limit_test_batches 0 "
    "--num_epochs 2 --ema_decay 0.9 --checkpoint_format whole ";

// The average a checkpoint holds, by name.
std::map<std::string, torch::Tensor> average_of(const std::string& checkpoint) {
  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  auto model = models::create_model("mlp", config);
  auto average = models::create_model("mlp", config);
  torch::optim::SGD optimizer(model.ptr()->parameters(), torch::optim::SGDOptions(0.05));
  const train::TrainPosition p =
      train::load_checkpoint(checkpoint, *model.ptr(), optimizer,
                             train::read_checkpoint_meta(checkpoint), average.ptr().get());
  EXPECT_GT(p.ema_updates, 0) << checkpoint << " holds an average";
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : average.ptr()->named_parameters()) out[item.key()] = item.value();
  for (const auto& item : model.ptr()->named_parameters()) {
    EXPECT_FALSE(item.value().equal(out[item.key()]))
        << checkpoint << ": " << item.key() << " the average is not the weights";
  }
  return out;
}

void expect_same_average(const std::string& got, const std::string& want, const std::string& what) {
  const auto a = average_of(got), b = average_of(want);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, value] : b) {
    const double diff = (a.at(name) - value).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << what << ": " << name;
  }
}

TEST(EmaTrainTest, SplitLayoutsEndWithTheOneProcessAverageAndZeroThreeResumesIt) {
  test::TempDir dir;
  auto one = run_command(ddpx(kRun + "--batch_size 32 --save_dir " + dir.file("one")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string want = train::checkpoint_path(dir.file("one"), 2);
  struct Layout {
    std::string name, flags;
  };
  for (const Layout& layout : {Layout{"zero3", "--batch_size 16 --shard full"},
                               Layout{"pipeline", "--batch_size 32 --pipeline_parallel 2"},
                               Layout{"tensor", "--batch_size 32 --tensor_parallel 2"}}) {
    auto r = run_command(ddpx("run 2 --log_dir " + dir.file("l" + layout.name) + " -- " + kRun +
                              layout.flags + " --save_dir " + dir.file(layout.name)),
                         300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_average(train::checkpoint_path(dir.file(layout.name), 2), want, layout.name);
  }
  auto resumed = run_command(
      ddpx("run 2 --log_dir " + dir.file("lresumed") + " -- " + kRun +
           "--batch_size 16 --shard full --resume " + train::checkpoint_path(dir.file("zero3"), 1) +
           " --save_dir " + dir.file("resumed")),
      300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_average(train::checkpoint_path(dir.file("resumed"), 2),
                      train::checkpoint_path(dir.file("zero3"), 2), "zero3 resumed after epoch 1");
}

}  // namespace
}  // namespace ddpx
