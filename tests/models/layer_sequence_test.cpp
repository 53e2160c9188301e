// A model's layer sequence (models/layer_sequence.h) is its forward, bit for bit, and names every
// parameter once: what a pipeline's stages rely on to train the model they split.
#include "models/layer_sequence.h"

#include <gtest/gtest.h>

#include <set>

#include "models/zoo/registry.h"

namespace ddpx::models {
namespace {

struct Case {
  const char* model;
  int64_t image_size;
};

class LayerSequenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(LayerSequenceTest, LayersComposeToTheForwardAndOwnEachParameterOnce) {
  const Case c = GetParam();
  torch::manual_seed(0);
  ModelConfig config{10, c.image_size, Stem::kImagenet};
  torch::nn::AnyModule model = create_model(c.model, config);
  model.ptr()->eval();  // dropout off: both runs see the same function
  auto layers = layer_sequence(model);
  ASSERT_TRUE(layers.has_value()) << c.model;
  ASSERT_GE(layers->size(), 3u);

  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::randn({2, 3, c.image_size, c.image_size});
  torch::Tensor whole = model.forward(x);
  torch::Tensor y = x;
  for (auto& layer : *layers) y = layer.forward(y);
  EXPECT_TRUE(torch::equal(whole, y)) << c.model << ": the layers' composition differs by "
                                      << (whole - y).abs().max().item<double>();

  std::multiset<const void*> owned;
  for (auto& layer : *layers)
    for (auto& p : layer.parameters) owned.insert(p.unsafeGetTensorImpl());
  for (auto& p : model.ptr()->parameters()) {
    EXPECT_EQ(owned.count(p.unsafeGetTensorImpl()), 1u)
        << c.model << ": a parameter of shape " << p.sizes() << " is not in one layer";
  }
  EXPECT_EQ(owned.size(), model.ptr()->parameters().size()) << c.model;
  size_t buffers = 0;
  for (auto& layer : *layers) buffers += layer.buffers.size();
  EXPECT_EQ(buffers, model.ptr()->buffers().size()) << c.model;
}

INSTANTIATE_TEST_SUITE_P(Zoo, LayerSequenceTest,
                         ::testing::Values(Case{"resnet18", 32}, Case{"resnet50", 32},
                                           Case{"resnet20", 32}, Case{"vgg11", 32},
                                           Case{"vit_b_16", 32}, Case{"mlp", 8},
                                           Case{"mobilenet_v2", 32}, Case{"mobilenet_v3_small", 32},
                                           Case{"efficientnet_b0", 32}, Case{"densenet121", 32}),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(LayerSequenceSequentialTest, OneLayerPerChildNamedByTheChild) {
  torch::nn::Sequential net(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  auto layers = layer_sequence(net);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].name, "0");
  EXPECT_EQ(layers[2].name, "2");
  EXPECT_EQ(layers[1].parameters.size(), 0u);
  torch::Tensor x = torch::randn({3, 4});
  torch::Tensor y = x;
  for (auto& layer : layers) y = layer.forward(y);
  EXPECT_TRUE(torch::equal(net->forward(x), y));
}

}  // namespace
}  // namespace ddpx::models
