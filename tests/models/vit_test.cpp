// Vision Transformer against torchvision: the tiny ViT (torchvision's weights through a file)
// against torchvision's VisionTransformer class with the same hyperparameters, at its own size
// (the default-size code path, no interpolation) and at 28 px through interpolate_embeddings;
// plus timm aliases, a training step and errors for inputs a ViT cannot take. Every ViT's
// logits at 32 px: zoo_all_parity_test.cpp. Keys and parameter counts:
// efficientnet_vit_structure_test.cpp.
#include "models/vit.h"

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <map>
#include <string>

#include "core/error.h"
#include "models/weights.h"
#include "models/zoo/registry.h"
#include "reference.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

// Runs `model` in eval mode on io.pt's x and compares with its y.
void expect_same_logits(torch::nn::AnyModule& model, const std::string& io_path,
                        const std::string& what) {
  const auto io = read_state_dict(io_path);
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  test::expect_logits_match(model.forward(io.at("x")), io.at("y"), what);
}

// vit_b_16 built for 32 px images keeps torchvision's 14x14 position embedding (so 224 px
// checkpoints load) and runs on a 2x2 grid; its logits there match torchvision's through
// interpolate_embeddings in zoo_all_parity_test.cpp, as do every other ViT's.
TEST(ViTTest, VitB16For32PixelsKeepsTheDefaultSizePositionEmbedding) {
  torch::nn::AnyModule model = create_model("vit_b_16", ModelConfig{10, 32, Stem::kImagenet});
  const auto& named = model.ptr()->named_parameters();
  EXPECT_EQ(named["encoder.pos_embedding"].sizes(), (std::vector<int64_t>{1, 197, 768}));
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model.forward(torch::randn({1, 3, 32, 32})).sizes(), (std::vector<int64_t>{1, 10}));
}

// torchvision has no tiny ViT, but its VisionTransformer class with vit_tiny_patch4_32's
// hyperparameters is one; at 28 px torchvision's interpolate_embeddings (bilinear) adapts the
// same weights, which is what ddpx does per input.
TEST(ViTParityTest, TinyVitMatchesTorchvisionClassAtNativeAndInterpolatedSizes) {
  test::TempDir dir;
  DDPX_RUN_TORCHVISION(
      run,
      "from torchvision.models.vision_transformer import VisionTransformer, "
      "interpolate_embeddings\n"
      "torch.manual_seed(0)\n"
      "kw = dict(patch_size=4, num_layers=6, num_heads=3, hidden_dim=192, mlp_dim=768, "
      "num_classes=10)\n"
      "m = VisionTransformer(image_size=32, **kw).eval()\n"
      "with torch.no_grad():\n"
      "    for p in m.parameters(): p.add_(0.05 * torch.randn_like(p))\n"  // the head is zeros
      "d = '" +
          dir.path() +
          "'\n"
          "torch.save(m.state_dict(), d + '/weights.pt')\n"
          "x = torch.randn(2, 3, 32, 32)\n"
          "with torch.no_grad(): y = m(x)\n"
          "torch.save({'x': x, 'y': y}, d + '/io32.pt')\n"
          "m28 = VisionTransformer(image_size=28, **kw).eval()\n"
          "m28.load_state_dict(interpolate_embeddings(28, 4, m.state_dict(), 'bilinear'))\n"
          "x = torch.randn(2, 3, 28, 28)\n"
          "with torch.no_grad(): y = m28(x)\n"
          "torch.save({'x': x, 'y': y}, d + '/io28.pt')\n"
          "print('REF ok')\n");
  ASSERT_EQ(run.lines.size(), 1u) << "reference script produced no output";
  torch::nn::AnyModule model =
      create_model("vit_tiny_patch4_32", ModelConfig{10, 32, Stem::kImagenet});
  load_named_tensors(*model.ptr(), read_state_dict(dir.file("weights.pt")));
  expect_same_logits(model, dir.file("io32.pt"), "vit_tiny_patch4_32 at 32 px");
  expect_same_logits(model, dir.file("io28.pt"), "vit_tiny_patch4_32 at 28 px (7x7 grid)");
}

TEST(ViTTest, PositionEmbeddingResizeKeepsClassTokenAndCorners) {
  const torch::Tensor pos = torch::randn({1, 1 + 8 * 8, 5});
  const torch::Tensor same = resize_position_embedding(pos, 8, 8);
  EXPECT_TRUE(torch::equal(same, pos));
  const torch::Tensor small = resize_position_embedding(pos, 2, 3);  // (1, 1 + 6, 5)
  ASSERT_EQ(small.sizes(), (std::vector<int64_t>{1, 7, 5}));
  EXPECT_TRUE(torch::equal(small[0][0], pos[0][0]));  // the class token's embedding
  // align_corners: the grid's corners are kept exactly.
  EXPECT_TRUE(torch::allclose(small[0][1], pos[0][1]));   // (0, 0)
  EXPECT_TRUE(torch::allclose(small[0][6], pos[0][64]));  // (last, last)
  EXPECT_THROW(resize_position_embedding(torch::randn({1, 1 + 10, 5}), 2, 2), Error);
}

TEST(ViTTest, TimmAliasesBuildTheTorchvisionModels) {
  for (const auto& [alias, name] :
       std::map<std::string, std::string>{{"vit_base_patch16_224", "vit_b_16"},
                                          {"vit_base_patch32_224", "vit_b_32"},
                                          {"vit_large_patch16_224", "vit_l_16"}}) {
    for (int64_t classes : {10, 1000}) {
      const ModelConfig config{classes, 224, Stem::kImagenet};
      EXPECT_EQ(model_parameter_count(find_model(alias), config),
                model_parameter_count(find_model(name), config))
          << alias;
    }
    EXPECT_EQ(find_model(alias).default_image_size, find_model(name).default_image_size);
  }
  // The smallest alias, built: vit_b_32's parameters (its keys are checked against
  // torchvision in efficientnet_vit_structure_test.cpp).
  const ModelConfig config{10, 224, Stem::kImagenet};
  torch::nn::AnyModule alias = create_model("vit_base_patch32_224", config);
  EXPECT_EQ(count_parameters(*alias.ptr()), model_parameter_count(find_model("vit_b_32"), config));
  EXPECT_EQ(alias.ptr()->named_parameters()["conv_proj.weight"].sizes(),
            (std::vector<int64_t>{768, 3, 32, 32}));
  const ModelInfo& seed = find_model("vit_base_patch16_224");
  EXPECT_EQ(seed.recommendation.optimizer, "adamw");
  EXPECT_DOUBLE_EQ(seed.recommendation.learning_rate, 1e-4);
  EXPECT_EQ(seed.recommendation.batch_size, 128);
  EXPECT_DOUBLE_EQ(seed.recommendation.weight_decay, 0.05);
}

TEST(ViTTest, TinyVitLearnsAFixedBatchAt32Pixels) {
  torch::manual_seed(0);
  torch::nn::AnyModule model =
      create_model("vit_tiny_patch4_32", ModelConfig{10, 32, Stem::kImagenet});
  ASSERT_EQ(count_parameters(*model.ptr()),
            model_parameter_count(find_model("vit_tiny_patch4_32"),
                                  ModelConfig{10, 32, Stem::kImagenet}));
  model.ptr()->train();
  torch::optim::AdamW optimizer(model.ptr()->parameters(), torch::optim::AdamWOptions(1e-3));
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  const torch::Tensor labels = torch::arange(4);
  double first = 0, last = 0;
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    torch::Tensor logits = model.forward(x);  // (4, 10)
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(10.0), 1e-4) << "torchvision's zero head gives uniform logits";
  EXPECT_LT(last, first);
  const auto& named = model.ptr()->named_parameters();
  EXPECT_GT(named["encoder.pos_embedding"].grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(named["class_token"].grad().abs().sum().item<double>(), 0.0);
}

TEST(ViTTest, RejectsInputsThatAreNotWholePatches) {
  torch::nn::AnyModule model =
      create_model("vit_tiny_patch4_32", ModelConfig{10, 32, Stem::kImagenet});
  torch::NoGradGuard no_grad;
  EXPECT_THROW(model.forward(torch::randn({2, 3, 30, 30})), Error);  // 30 is not a multiple of 4
  EXPECT_THROW(model.forward(torch::randn({2, 1, 32, 32})), Error);  // grayscale
  EXPECT_THROW(model.forward(torch::randn({3, 32, 32})), Error);     // no batch dimension
  EXPECT_THROW(create_model("vit_b_16", ModelConfig{10, 224, Stem::kCifar}), Error);
}

}  // namespace
}  // namespace ddpx::models
