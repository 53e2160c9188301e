// DenseNet and MobileNetV3 beyond structure and logits: BatchNorm eps/momentum and dropout
// rates as torchvision's, dropout active only in train mode, small inputs, and clear errors.
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/dropout.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/zoo/registry.h"
#include "reference.h"

namespace ddpx::models {
namespace {

// One line per BatchNorm ("BN eps momentum") and Dropout ("DROP p"), in module order.
std::vector<std::string> regularisation_settings(const torch::nn::Module& model) {
  std::vector<std::string> lines;
  for (const auto& module : model.modules(/*include_self=*/false)) {
    std::ostringstream line;
    if (const auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      line << "BN " << bn->options.eps() << " " << bn->options.momentum().value();
    } else if (const auto* drop = module->as<torch::nn::Dropout>()) {
      line << "DROP " << drop->options.p();
    } else {
      continue;
    }
    lines.push_back(line.str());
  }
  return lines;
}

void expect_torchvision_regularisation(const std::string& name) {
  // Python's str(float) and C++'s ostream print 0.001, 1e-05, 0.1 the same way.
  DDPX_RUN_TORCHVISION(
      run,
      "nn.init.kaiming_normal_ = nn.init.normal_ = lambda t, *a, **k: t\n"
      "m = torchvision.models." +
          name +
          "(num_classes=10)\n"
          "for mod in m.modules():\n"
          "    if isinstance(mod, nn.BatchNorm2d): print('REF BN', mod.eps, mod.momentum)\n"
          "    elif isinstance(mod, nn.Dropout): print('REF DROP', mod.p)\n"
          "    elif type(mod).__name__ in ('StochasticDepth', 'Dropout2d'): print('REF', mod)\n");
  torch::nn::AnyModule model = create_model(name, ModelConfig{10, 224, Stem::kImagenet});
  EXPECT_EQ(regularisation_settings(*model.ptr()), run.lines) << name;
}

TEST(DenseNetTest, BatchNormAndDropoutMatchTorchvision) {
  expect_torchvision_regularisation("densenet121");
}

TEST(MobileNetV3Test, BatchNormAndDropoutMatchTorchvision) {
  expect_torchvision_regularisation("mobilenet_v3_small");
}

TEST(DenseNetTest, InputSmallerThan29PixelsIsAUsageErrorNaming29) {
  auto model = create_model("densenet121", ModelConfig{10, 28, Stem::kImagenet});
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  try {
    model.forward(torch::randn({2, 3, 28, 28}));
    FAIL() << "a 28x28 input reached the pooling layers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("29"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.forward(torch::randn({2, 3, 29, 29})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(MobileNetV3Test, RunsOn28PixelImages) {
  auto model = create_model("mobilenet_v3_small", ModelConfig{10, 28, Stem::kImagenet});
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model.forward(torch::randn({2, 3, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(MobileNetV3Test, ClassifierDropoutActsOnlyInTrainMode) {
  auto model = create_model("mobilenet_v3_small", ModelConfig{10, 32, Stem::kImagenet});
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  model.ptr()->eval();
  EXPECT_TRUE(torch::equal(model.forward(x), model.forward(x)));
  model.ptr()->train();  // BatchNorm uses batch statistics: deterministic; dropout is not
  EXPECT_FALSE(torch::equal(model.forward(x), model.forward(x)));
}

TEST(DenseNetTest, GrayscaleInputAndCifarStemAreUsageErrors) {
  auto model = create_model("densenet121", ModelConfig{10, 32, Stem::kImagenet});
  EXPECT_THROW(model.forward(torch::randn({2, 1, 32, 32})), Error);
  EXPECT_THROW(create_model("densenet121", ModelConfig{10, 32, Stem::kCifar}), Error);
  EXPECT_THROW(create_model("mobilenet_v3_large", ModelConfig{10, 32, Stem::kCifar}), Error);
}

}  // namespace
}  // namespace ddpx::models
