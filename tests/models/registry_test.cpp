// The registry: lookup, actionable errors, the seed's recommendations, and forward shapes.
#include "models/zoo/registry.h"

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <set>
#include <string>

#include "core/error.h"

namespace ddpx::models {
namespace {

// Runs `fn`, expecting a ddpx::Error of `kind`; returns its message.
template <typename Fn>
std::string error_message(Fn fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a ddpx::Error";
  return "";
}

TEST(RegistryTest, ListsEveryResNetOnceInStableOrder) {
  std::vector<std::string> names;
  std::set<std::string> unique;
  for (const ModelInfo& info : model_table()) {
    names.push_back(info.name);
    unique.insert(info.name);
    EXPECT_TRUE(info.build) << info.name;
    EXPECT_GT(info.default_image_size, 0) << info.name;
  }
  EXPECT_EQ(unique.size(), names.size()) << "duplicate names";
  const std::vector<std::string> resnets = {"resnet18",       "resnet34",  "resnet50",
                                            "resnet101",      "resnet152", "wide_resnet50_2",
                                            "resnext50_32x4d"};
  ASSERT_GE(names.size(), resnets.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 7), resnets);
}

TEST(RegistryTest, UnknownNameIsAUsageErrorListingKnownNames) {
  const std::string message =
      error_message([] { create_model("resnet19", ModelConfig{}); }, ErrorKind::kUsage);
  EXPECT_NE(message.find("resnet19"), std::string::npos) << message;
  for (const ModelInfo& info : model_table()) {
    EXPECT_NE(message.find(info.name), std::string::npos) << message;
  }
}

TEST(RegistryTest, BadConfigIsAUsageError) {
  ModelConfig config;
  config.num_classes = 0;
  error_message([&] { create_model("resnet18", config); }, ErrorKind::kUsage);
  config = ModelConfig{};
  config.stem = Stem::kCifar;
  const std::string message =
      error_message([&] { create_model("vgg11", config); }, ErrorKind::kUsage);
  EXPECT_NE(message.find("vgg11 has no 'cifar' stem"), std::string::npos) << message;
}

TEST(StemTest, EveryStemHasANameThatParsesBack) {
  for (Stem stem : {Stem::kImagenet, Stem::kCifar}) {
    EXPECT_EQ(stem_from_name(name(stem), "--stem"), stem) << name(stem);
  }
  EXPECT_STREQ(name(Stem::kCifar), "cifar");
}

TEST(StemTest, UnknownStemNameIsAUsageErrorNamingTheFlagAndChoices) {
  const std::string message =
      error_message([] { stem_from_name("tiny", "--stem"); }, ErrorKind::kUsage);
  EXPECT_EQ(message, "--stem 'tiny' is not one of imagenet, cifar");
}

TEST(RegistryTest, SeedRecommendationsAreKept) {
  const Recommendation& r18 = find_model("resnet18").recommendation;
  EXPECT_EQ(r18.optimizer, "sgd");
  EXPECT_DOUBLE_EQ(r18.learning_rate, 0.001);
  EXPECT_EQ(r18.batch_size, 256);
  EXPECT_EQ(r18.note, "quick test");
  const Recommendation& r101 = find_model("resnet101").recommendation;
  EXPECT_EQ(r101.optimizer, "sgd");
  EXPECT_DOUBLE_EQ(r101.learning_rate, 0.002);
  EXPECT_EQ(r101.batch_size, 1024);
  EXPECT_EQ(r101.normalize, "neg_one_one");
  EXPECT_EQ(find_model("resnet50").default_image_size, 224);
}

TEST(ResNetForwardTest, Resnet18AcceptsSmallImagesWithEitherStem) {
  for (Stem stem : {Stem::kImagenet, Stem::kCifar}) {
    ModelConfig config;
    config.num_classes = 10;
    config.stem = stem;
    torch::nn::AnyModule model = create_model("resnet18", config);
    for (int64_t size : {28, 32}) {
      const torch::Tensor y = model.forward(torch::randn({2, 3, size, size}));
      EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10})) << name(stem) << " " << size;
      EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
    }
  }
}

TEST(ResNetForwardTest, GrayscaleInputIsAUsageErrorNamingTheShape) {
  torch::nn::AnyModule model = create_model("resnet18", ModelConfig{10, 28, Stem::kCifar});
  const std::string message = error_message(
      [&] {
        model.forward(torch::randn({2, 1, 28, 28}));
      },
      ErrorKind::kUsage);
  EXPECT_NE(message.find("2x1x28x28"), std::string::npos) << message;
}

TEST(ResNetForwardTest, GradientsReachEveryParameter) {
  torch::nn::AnyModule model = create_model("resnet18", ModelConfig{10, 32, Stem::kCifar});
  model.forward(torch::randn({2, 3, 32, 32})).sum().backward();
  for (const auto& item : model.ptr()->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
  }
}

TEST(ZooForwardTest, MobilenetAndVggGiveLogitsForSmallImages) {
  for (const std::string name : {"mobilenet_v2", "vgg11_bn"}) {
    torch::nn::AnyModule model = create_model(name, ModelConfig{10, 32, Stem::kImagenet});
    const torch::Tensor y = model.forward(torch::randn({2, 3, 32, 32}));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10})) << name;
  }
}

TEST(ZooForwardTest, CifarStemOnANonResNetIsAUsageError) {
  const std::string message = error_message(
      [] {
        create_model("mobilenet_v2", ModelConfig{10, 32, Stem::kCifar});
      },
      ErrorKind::kUsage);
  EXPECT_NE(message.find("resnet"), std::string::npos) << message;
}

TEST(ZooForwardTest, VggRejectsImagesSmallerThanItsFivePools) {
  torch::nn::AnyModule model = create_model("vgg11", ModelConfig{10, 28, Stem::kImagenet});
  const std::string message = error_message(
      [&] {
        model.forward(torch::randn({1, 3, 28, 28}));
      },
      ErrorKind::kUsage);
  EXPECT_NE(message.find("--image_size"), std::string::npos) << message;
}

TEST(ResNetInitTest, MatchesTorchvisionInitialisation) {
  torch::manual_seed(1);
  torch::nn::AnyModule model = create_model("resnet18", ModelConfig{10, 224, Stem::kImagenet});
  const auto params = model.ptr()->named_parameters();
  // kaiming_normal_(fan_out, relu): std = sqrt(2 / (out_channels * k * k)); 2.4M samples.
  const torch::Tensor w = params["layer4.0.conv2.weight"];
  const double expected_std = std::sqrt(2.0 / (512 * 9));
  EXPECT_NEAR(w.std().item<double>(), expected_std, 0.01 * expected_std);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-4);
  EXPECT_TRUE(params["layer2.0.bn1.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(params["layer2.0.bn1.bias"].eq(0).all().item<bool>());
  // Linear keeps PyTorch's default: uniform within 1/sqrt(in_features), not constant.
  const double bound = 1.0 / std::sqrt(512.0);
  EXPECT_LE(params["fc.weight"].abs().max().item<double>(), bound);
  EXPECT_GT(params["fc.weight"].std().item<double>(), 0.5 * bound / std::sqrt(3.0));
}

// The sizes each model takes: 28 px (Fashion-MNIST) is raised to 32 for the ViTs' 16- and
// 32-px patches and for VGG and DenseNet; 32 px (CIFAR) suits every model, and a size a model
// takes is kept.
TEST(FitImageSizeTest, RaisesToTheNearestSizeTheModelTakes) {
  EXPECT_EQ(fit_image_size(find_model("vit_b_16"), 28), 32);
  EXPECT_EQ(fit_image_size(find_model("vit_b_16"), 100), 112);
  EXPECT_EQ(fit_image_size(find_model("vit_b_32"), 28), 32);
  EXPECT_EQ(fit_image_size(find_model("vit_tiny_patch4_32"), 28), 28);
  EXPECT_EQ(fit_image_size(find_model("vgg11"), 28), 32);
  EXPECT_EQ(fit_image_size(find_model("densenet121"), 28), 32);
  EXPECT_EQ(fit_image_size(find_model("resnet18"), 28), 28);
  EXPECT_EQ(image_size_rule(find_model("vit_b_16")), "vit_b_16 takes multiples of its 16-px patch");
  EXPECT_EQ(image_size_rule(find_model("vgg11")), "vgg11 takes at least 32 px");
  EXPECT_EQ(image_size_rule(find_model("resnet18")), "");
  for (const ModelInfo& info : model_table()) {
    EXPECT_EQ(fit_image_size(info, 32), 32) << info.name;
    EXPECT_EQ(fit_image_size(info, info.default_image_size), info.default_image_size) << info.name;
  }
}

// The rule is enough: DenseNet, the family whose limit is not a patch or five pools, gives
// logits at the size the rule raises 28 px to, and none at 28.
TEST(FitImageSizeTest, DenseNetRunsAtTheFittedSize) {
  torch::nn::AnyModule model = create_model("densenet121", ModelConfig{10, 32, Stem::kImagenet});
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const int64_t size = fit_image_size(find_model("densenet121"), 28);
  EXPECT_EQ(model.forward(torch::randn({1, 3, size, size})).sizes(), (std::vector<int64_t>{1, 10}));
  EXPECT_ANY_THROW(model.forward(torch::randn({1, 3, 28, 28})));
}

}  // namespace
}  // namespace ddpx::models
