// EfficientNet's regularisation and normalisation settings against torchvision (BatchNorm eps
// and momentum, classifier dropout, each block's stochastic-depth probability), stochastic
// depth's train/eval behaviour, small inputs and the seed recommendation. Structure and logits
// are checked in zoo_structure_test.cpp and zoo_parity_test.cpp.
#include "models/efficientnet.h"

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/zoo/registry.h"
#include "reference.h"

namespace ddpx::models {
namespace {

TEST(EfficientNetTest, BatchNormDropoutAndStochasticDepthMatchTorchvision) {
  const std::vector<std::string> names = {"efficientnet_b0", "efficientnet_b4", "efficientnet_b5",
                                          "efficientnet_b7"};
  std::string script =
      "from torchvision.models.efficientnet import MBConv\n"
      "nn.Conv2d.reset_parameters = lambda self: None\n"
      "nn.Linear.reset_parameters = lambda self: None\n"
      "nn.init.kaiming_normal_ = nn.init.uniform_ = lambda t, *a, **k: t\n"
      "for name in [";
  for (const std::string& n : names) script += "'" + n + "', ";
  script +=
      "]:\n"
      "    m = getattr(torchvision.models, name)(num_classes=10)\n"
      "    bns = {(b.eps, b.momentum) for b in m.modules() if isinstance(b, nn.BatchNorm2d)}\n"
      "    assert len(bns) == 1\n"
      "    eps, mom = bns.pop()\n"
      "    sd = [b.stochastic_depth.p for b in m.modules() if isinstance(b, MBConv)]\n"
      "    print('REF', name, repr(eps), repr(mom), repr(m.classifier[0].p), len(sd), "
      "' '.join(map(repr, sd)), flush=True)\n";
  DDPX_RUN_TORCHVISION(run, script);
  ASSERT_EQ(run.lines.size(), names.size()) << "reference script produced no output";

  for (size_t i = 0; i < names.size(); ++i) {
    std::istringstream in(run.lines[i]);
    std::string name;
    double eps = 0, momentum = 0, dropout = 0;
    size_t blocks = 0;
    in >> name >> eps >> momentum >> dropout >> blocks;
    ASSERT_EQ(name, names[i]);
    std::vector<double> expected_sd(blocks);
    for (double& p : expected_sd) in >> p;

    torch::nn::AnyModule model = create_model(name, ModelConfig{10, 224, Stem::kImagenet});
    std::vector<double> sd;
    double model_dropout = -1;
    for (const auto& module : model.ptr()->modules(/*include_self=*/false)) {
      if (const auto* bn = module->as<torch::nn::BatchNorm2d>()) {
        ASSERT_DOUBLE_EQ(bn->options.eps(), eps) << name;
        ASSERT_DOUBLE_EQ(bn->options.momentum().value(), momentum) << name;
      } else if (const auto* block = module->as<MBConv>()) {
        sd.push_back(block->stochastic_depth_prob());
      } else if (const auto* dropout_layer = module->as<torch::nn::Dropout>()) {
        model_dropout = dropout_layer->options.p();
      }
    }
    EXPECT_DOUBLE_EQ(model_dropout, dropout) << name;
    ASSERT_EQ(sd.size(), expected_sd.size()) << name << ": number of MBConv blocks";
    for (size_t b = 0; b < sd.size(); ++b) {
      EXPECT_NEAR(sd[b], expected_sd[b], 1e-12) << name << " block " << b;
    }
  }
}

TEST(EfficientNetTest, StochasticDepthDropsWholeSamplesOnlyInTraining) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::rand({64, 4, 3, 3}) + 1;  // strictly positive
  EXPECT_TRUE(torch::equal(stochastic_depth_rows(x, 0.5, /*training=*/false), x));
  EXPECT_TRUE(torch::equal(stochastic_depth_rows(x, 0.0, /*training=*/true), x));
  const torch::Tensor y = stochastic_depth_rows(x, 0.5, /*training=*/true);
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.size(0); ++i) {
    if (y[i].abs().sum().item<double>() == 0) {
      ++dropped;
    } else {
      EXPECT_TRUE(torch::allclose(y[i], 2 * x[i])) << "survivors are scaled by 1/(1-p)";
    }
  }
  EXPECT_GT(dropped, 10);  // p = 0.5 over 64 rows
  EXPECT_LT(dropped, 54);
  EXPECT_THROW(stochastic_depth_rows(x, 1.5, true), Error);
}

TEST(EfficientNetTest, B0RunsOn32PixelImagesAndIsDeterministicInEval) {
  torch::manual_seed(0);
  torch::nn::AnyModule model =
      create_model("efficientnet_b0", ModelConfig{10, 32, Stem::kImagenet});
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  model.ptr()->train();
  torch::Tensor logits = model.forward(x);  // (2, 10)
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10}));
  logits.sum().backward();
  for (const auto& p : model.ptr()->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
  }
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model.forward(x), model.forward(x)));
  EXPECT_THROW(model.forward(torch::randn({2, 1, 32, 32})), Error);
  EXPECT_THROW(create_model("efficientnet_b0", ModelConfig{10, 32, Stem::kCifar}), Error);
}

TEST(EfficientNetTest, DefaultImageSizesAndSeedRecommendation) {
  const int64_t sizes[] = {224, 240, 288, 300, 380, 456, 528, 600};  // torchvision's crop sizes
  for (int v = 0; v < 8; ++v) {
    EXPECT_EQ(find_model("efficientnet_b" + std::to_string(v)).default_image_size, sizes[v]);
  }
  const Recommendation& r = find_model("efficientnet_b0").recommendation;
  EXPECT_EQ(r.optimizer, "adamw");
  EXPECT_DOUBLE_EQ(r.learning_rate, 1e-3);
  EXPECT_EQ(r.batch_size, 256);
  EXPECT_DOUBLE_EQ(r.weight_decay, 1e-5);
}

}  // namespace
}  // namespace ddpx::models
