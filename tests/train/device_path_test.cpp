// The trainer's device path on CPU: metrics kept on the device agree with the host's sums.
#include <gtest/gtest.h>

#include "train/metrics.h"

namespace ddpx::train {
namespace {

TEST(DeviceSumsTest, AgreesWithTheHostSums) {
  DeviceSums device(torch::kCPU);
  MetricSums host;
  torch::manual_seed(0);
  for (int i = 0; i < 5; ++i) {
    auto logits = torch::randn({7, 3});
    auto labels = torch::randint(0, 3, {7}, torch::kInt64);
    auto loss = torch::rand({});
    device.add(loss, logits, labels);
    host.add(loss.item<double>(), logits.argmax(1).eq(labels).sum().item<int64_t>(), 7);
  }
  MetricSums read = device.read();
  EXPECT_NEAR(read.loss_sum, host.loss_sum, 1e-9);
  EXPECT_EQ(read.correct, host.correct);
  EXPECT_EQ(read.count, 35);
  EXPECT_EQ(read.inputs, 35);
}

// A masked LM's labels: -100 where nothing is predicted. Those positions neither count nor weigh
// in the loss sum; throughput still counts every token.
TEST(DeviceSumsTest, MaskedLabelsAreNotScored) {
  DeviceSums device(torch::kCPU);
  auto logits = torch::randn({2, 4, 5});
  auto labels =
      torch::tensor({{-100, 3, -100, 1}, {2, -100, -100, -100}}, torch::kInt64).view({2, 4});
  device.add(torch::tensor(2.0), logits, labels);
  MetricSums read = device.read();
  EXPECT_EQ(read.count, 3);
  EXPECT_EQ(read.inputs, 8);
  EXPECT_NEAR(read.loss_sum, 6.0, 1e-12);
  EXPECT_LE(read.correct, 3);
}

}  // namespace
}  // namespace ddpx::train
