// The trainer's device path on CPU: autocast regions (bf16 on CPU, as --amp bf16), the fp16
// refusal on CPU, metrics kept on the device, channels_last placement, and the batch feeder.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"
#include "data/loader.h"
#include "train/amp.h"
#include "train/metrics.h"
#include "train/placement.h"

namespace ddpx::train {
namespace {

TEST(AmpTest, Bf16AutocastOnCpuComputesInBf16InsideAndRestoresAfter) {
  torch::nn::Linear linear(8, 4);
  auto x = torch::randn({2, 8});
  {
    AutocastGuard guard(Amp::kBf16, torch::kCPU);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16);
    // Weights stay fp32: autocast casts copies for the op.
    EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat32);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(linear(x).scalar_type(), torch::kFloat32);
}

TEST(AmpTest, OffChangesNothing) {
  torch::nn::Linear linear(8, 4);
  AutocastGuard guard(Amp::kOff, torch::kCPU);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(linear(torch::randn({2, 8})).scalar_type(), torch::kFloat32);
}

TEST(AmpTest, Fp16OnCpuIsRefusedInOneLineNamingTheWayOut) {
  try {
    check_amp(Amp::kFp16, torch::kCPU);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    std::string message = e.what();
    EXPECT_NE(message.find("--amp fp16"), std::string::npos) << message;
    EXPECT_NE(message.find("--amp bf16"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(check_amp(Amp::kBf16, torch::kCPU));
  EXPECT_NO_THROW(check_amp(Amp::kFp16, torch::Device(torch::kCUDA, 0)));
}

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
}

TEST(PlacementTest, ChannelsLastKeepsParameterIdentityAndValues) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3));
  auto weight = conv->weight;
  auto values = weight.detach().clone();
  place_model(*conv, torch::kCPU, /*channels_last=*/true);
  EXPECT_TRUE(conv->weight.is_same(weight)) << "optimizers hold the parameter itself";
  EXPECT_TRUE(conv->weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(conv->bias.is_contiguous());
  EXPECT_TRUE(torch::equal(conv->weight, values));
  // The output is the same as with the contiguous layout.
  auto x = torch::randn({2, 3, 8, 8});
  torch::nn::Conv2d plain(torch::nn::Conv2dOptions(3, 8, 3));
  {
    torch::NoGradGuard no_grad;
    plain->weight.copy_(values);
    plain->bias.copy_(conv->bias);
  }
  EXPECT_TRUE(
      torch::allclose(conv(x.contiguous(torch::MemoryFormat::ChannelsLast)), plain(x), 1e-5, 1e-6));
}

TEST(DeviceFeederTest, YieldsTheLoadersBatchesInOrder) {
  data::Dataset dataset;
  dataset.images = torch::arange(10 * 4 * 4 * 3, torch::kInt64)
                       .remainder(256)
                       .to(torch::kUInt8)
                       .reshape({10, 4, 4, 3});
  dataset.labels = torch::arange(10, torch::kInt64);
  dataset.num_classes = 10;
  data::LoaderOptions options;
  options.batch_size = 4;
  options.transform.normalize = data::Normalize::kNone;
  data::DataLoader loader(dataset, options);
  std::vector<int64_t> order{9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  loader.start_epoch(order, 0);
  DeviceFeeder feeder(loader, torch::kCPU, /*channels_last=*/true);
  std::vector<int64_t> labels;
  while (auto batch = feeder.next()) {
    EXPECT_TRUE(batch->images.is_contiguous(torch::MemoryFormat::ChannelsLast));
    for (int64_t i = 0; i < batch->size(); ++i) labels.push_back(batch->labels[i].item<int64_t>());
  }
  EXPECT_EQ(labels, order);
  EXPECT_GE(feeder.wait_seconds(), 0.0);
}

}  // namespace
}  // namespace ddpx::train
