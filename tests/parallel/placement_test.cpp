// Putting the model and its batches on the device, on CPU: channels_last placement and the batch
// feeder.
#include "parallel/placement.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>

#include "data/loader.h"

namespace ddpx::parallel {
namespace {

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
}  // namespace ddpx::parallel
