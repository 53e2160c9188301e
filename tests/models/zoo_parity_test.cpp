// Output parity with torchvision through a weight file: torchvision's own initialisation, saved
// by Python (torch.save of the state_dict) and loaded by name into the ddpx model, gives the
// same logits in eval mode, for one or more members of each family whose weights are small
// enough to pass through a file. BatchNorm statistics and affine terms are randomised first so
// that every loaded tensor affects the output. Every model (VGG and ViT included), with
// generated weights: zoo_all_parity_test.cpp.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>

#include "models/weights.h"
#include "models/zoo/registry.h"
#include "reference.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

std::string parity_script(const std::string& name, const std::string& stem, int64_t size,
                          const std::string& dir) {
  std::string s = "torch.manual_seed(0)\nm = torchvision.models." + name + "(num_classes=10)\n";
  if (stem == "cifar") {
    s += "m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)\nm.maxpool = nn.Identity()\n";
  }
  s += "with torch.no_grad():\n"
       "    for mod in m.modules():\n"
       "        if isinstance(mod, nn.BatchNorm2d):\n"
       "            mod.running_mean.uniform_(-0.5, 0.5); mod.running_var.uniform_(0.5, 1.5)\n"
       "            mod.weight.uniform_(0.5, 1.5); mod.bias.uniform_(-0.2, 0.2)\n"
       "            mod.num_batches_tracked.fill_(7)\n"
       // torchvision zero-initialises some biases (SE, classifier): randomise them to count.
       "        elif isinstance(mod, (nn.Conv2d, nn.Linear)) and mod.bias is not None:\n"
       "            mod.bias.uniform_(-0.2, 0.2)\n"
       "m.eval()\n"
       "x = torch.randn(2, 3, " +
       std::to_string(size) + ", " + std::to_string(size) +
       ")\n"
       "with torch.no_grad(): y = m(x)\n"
       "d = '" +
       dir +
       "'\n"
       // The state_dict itself (an OrderedDict with _metadata), as torchvision ships weights.
       "torch.save(m.state_dict(), d + '/weights.pt')\n"
       "torch.save({'x': x, 'y': y}, d + '/io.pt')\n"
       "print('REF ok', y.abs().max().item())\n";
  return s;
}

void expect_parity(const std::string& name, const std::string& stem, int64_t size) {
  test::TempDir dir;
  DDPX_RUN_TORCHVISION(run, parity_script(name, stem, size, dir.path()));
  ASSERT_EQ(run.lines.size(), 1u) << "reference script produced no output";

  ModelConfig config;
  config.num_classes = 10;
  config.stem = stem_from_name(stem, "test stem");
  torch::nn::AnyModule model = create_model(name, config);
  load_named_tensors(*model.ptr(), read_state_dict(dir.file("weights.pt")));
  const auto io = read_state_dict(dir.file("io.pt"));
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor y = model.forward(io.at("x"));  // (2, 10)
  test::expect_logits_match(y, io.at("y"), name + " (" + stem + " stem)");

  // The loaded buffers are the file's, not the defaults (e.g. num_batches_tracked).
  for (const auto& buffer : model.ptr()->named_buffers()) {
    if (buffer.value().scalar_type() == torch::kLong) {
      EXPECT_EQ(buffer.value().item<int64_t>(), 7) << buffer.key();
    }
  }
}

TEST(ResNetParityTest, Resnet18LogitsMatchTorchvision) {
  expect_parity("resnet18", "imagenet", 64);
}

TEST(ResNetParityTest, Resnet50LogitsMatchTorchvision) {
  expect_parity("resnet50", "imagenet", 64);
}

TEST(ResNetParityTest, Resnet18CifarStemLogitsMatchTorchvisionWithSwappedStem) {
  expect_parity("resnet18", "cifar", 32);
}

TEST(ResNetParityTest, Resnext50LogitsMatchTorchvision) {
  expect_parity("resnext50_32x4d", "imagenet", 64);
}

TEST(MobileNetParityTest, MobilenetV2LogitsMatchTorchvision) {
  expect_parity("mobilenet_v2", "imagenet", 64);
}

// 32 px: the smallest members also run on CIFAR-sized images (DenseNet needs at least 29).
TEST(DenseNetParityTest, Densenet121LogitsMatchTorchvisionAt32Pixels) {
  expect_parity("densenet121", "imagenet", 32);
}

TEST(MobileNetParityTest, MobilenetV3SmallLogitsMatchTorchvisionAt32Pixels) {
  expect_parity("mobilenet_v3_small", "imagenet", 32);
}

TEST(MobileNetParityTest, MobilenetV3LargeLogitsMatchTorchvision) {
  expect_parity("mobilenet_v3_large", "imagenet", 64);
}

// Stochastic depth and dropout are inactive in eval mode, so the logits are deterministic.
TEST(EfficientNetParityTest, EfficientnetB0LogitsMatchTorchvision) {
  expect_parity("efficientnet_b0", "imagenet", 64);
}

}  // namespace
}  // namespace ddpx::models
