// Forward FLOPs counted by running the model (models/flops.h), against torchvision's published
// multiply-add counts ("GFLOPS" in its model tables) x 2.
#include "models/flops.h"

#include <gtest/gtest.h>

#include "models/zoo/registry.h"

namespace ddpx::models {
namespace {

double forward_gflop(const std::string& name, int64_t image_size, Stem stem) {
  ModelConfig config;
  config.num_classes = 1000;
  config.image_size = image_size;
  config.stem = stem;
  torch::manual_seed(0);
  auto model = create_model(name, config);
  model.ptr()->eval();
  return count_forward_flops(model, torch::zeros({1, 3, image_size, image_size})) / 1e9;
}

TEST(FlopsTest, ResNetsMatchTorchvisionsPublishedCounts) {
  // torchvision: resnet18 1.81, resnet50 4.09 multiply-add G at 224x224.
  EXPECT_NEAR(forward_gflop("resnet18", 224, Stem::kImagenet), 2 * 1.814, 2 * 1.814 * 0.01);
  EXPECT_NEAR(forward_gflop("resnet50", 224, Stem::kImagenet), 2 * 4.089, 2 * 4.089 * 0.01);
}

TEST(FlopsTest, ScalesWithTheBatchAndCountsTheCifarStem) {
  ModelConfig config;
  config.num_classes = 10;
  config.image_size = 32;
  config.stem = Stem::kCifar;
  auto model = create_model("resnet18", config);
  model.ptr()->eval();
  double one = count_forward_flops(model, torch::zeros({1, 3, 32, 32}));
  double four = count_forward_flops(model, torch::zeros({4, 3, 32, 32}));
  EXPECT_NEAR(four, 4 * one, one * 1e-9);
  // ResNet-18 with the 3x3 stride-1 stem keeps 32x32 in its first stage: 0.56 G multiply-adds.
  EXPECT_NEAR(one / 1e9, 2 * 0.556, 2 * 0.556 * 0.02);
}

TEST(FlopsTest, CountsATrainingModelOnOneImageAndKeepsItsMode) {
  // At 32x32 the ImageNet stem leaves 1x1 before the head: batch norm in training mode would
  // refuse a batch of one.
  ModelConfig config;
  config.num_classes = 10;
  config.image_size = 32;
  auto model = create_model("resnet18", config);
  model.ptr()->train();
  EXPECT_GT(count_forward_flops(model, torch::zeros({1, 3, 32, 32})), 0);
  EXPECT_TRUE(model.ptr()->is_training());
}

}  // namespace
}  // namespace ddpx::models
