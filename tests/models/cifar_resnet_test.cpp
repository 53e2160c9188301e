// The CIFAR ResNets (He et al. 2016): the depth-to-blocks rule, the published parameter count,
// the shapes through the stages at 28 and 32 px, and that they learn.
#include "models/cifar_resnet.h"

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include "models/zoo/registry.h"

namespace ddpx::models {
namespace {

TEST(CifarResNetTest, Resnet20HasThePublishedParameterCount) {
  auto model = create_model("resnet20", ModelConfig{10, 32, Stem::kImagenet});
  // 269,722 with the paper's zero-padding shortcuts (option A), plus the two 1x1 projection
  // shortcuts with BatchNorm of option B: 16*32 + 2*32 + 32*64 + 2*64 = 2,752.
  EXPECT_EQ(count_parameters(*model.ptr()), 272474);
  auto* net = model.ptr()->as<CifarResNetImpl>();
  ASSERT_NE(net, nullptr);
  EXPECT_EQ(net->layer1->size(), 3u);
  EXPECT_EQ(create_model("resnet56", ModelConfig{10, 32, Stem::kImagenet})
                .ptr()
                ->as<CifarResNetImpl>()
                ->layer3->size(),
            9u);
}

TEST(CifarResNetTest, KeepsFullResolutionIntoTheFirstStage) {
  auto model = create_model("resnet20", ModelConfig{10, 28, Stem::kImagenet});
  auto* net = model.ptr()->as<CifarResNetImpl>();
  auto x = torch::randn({2, 3, 28, 28});
  auto stem = torch::relu(net->bn1(net->conv1(x)));
  EXPECT_EQ(stem.sizes(), (std::vector<int64_t>{2, 16, 28, 28}));
  auto s3 = net->layer3->forward(net->layer2->forward(net->layer1->forward(stem)));
  EXPECT_EQ(s3.sizes(), (std::vector<int64_t>{2, 64, 7, 7}));
  EXPECT_EQ(model.forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(CifarResNetTest, FitsASmallBatch) {
  torch::manual_seed(0);
  auto model = create_model("resnet20", ModelConfig{4, 16, Stem::kImagenet});
  torch::optim::Adam optimizer(model.ptr()->parameters(), torch::optim::AdamOptions(0.01));
  auto x = torch::randn({16, 3, 16, 16});
  auto y = torch::arange(16, torch::kLong) % 4;
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.2) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace ddpx::models
