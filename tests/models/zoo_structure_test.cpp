// Every model in the zoo (ResNet, VGG, DenseNet, MobileNetV2/V3) has torchvision's exact
// state_dict: the same parameter and buffer names with the same shapes, and the same parameter
// counts (at 10 and 1000 classes), so torchvision checkpoints load by name and `ddpx models`
// reports true sizes.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "models/zoo/registry.h"
#include "reference.h"

namespace ddpx::models {
namespace {

using ShapeMap = std::map<std::string, std::string>;  // name -> "d0,d1,..."

std::string shape_key(const torch::Tensor& t) {
  std::string out;
  for (int64_t d : t.sizes()) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

struct Reference {
  ShapeMap parameters, buffers;
  int64_t count10 = -1, count1000 = -1;
};

// torchvision's structure for each of `names` at 10 classes and its parameter count at 10 and
// 1000, in one Python run (each line prefixed by the model's name). Initialisation is stubbed
// out: only shapes are needed, and init dominates build time.
std::string reference_script(const std::vector<std::string>& names, bool cifar) {
  std::string list;
  for (const auto& n : names) list += "'" + n + "', ";
  std::string s =
      "nn.Conv2d.reset_parameters = lambda self: None\n"
      "nn.Linear.reset_parameters = lambda self: None\n"
      "nn.init.kaiming_normal_ = lambda t, *a, **k: t\n"
      "nn.init.normal_ = lambda t, *a, **k: t\n"
      "def fix(m):\n";
  s += cifar ? "    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False); m.maxpool = nn.Identity()\n"
             : "    pass\n";
  s += "    return m\n"
       "for name in [" +
       list +
       "]:\n"
       "    build = getattr(torchvision.models, name)\n"
       "    m = fix(build(num_classes=10))\n"
       "    for n, p in m.named_parameters(): print('REF', name, 'P', n, ','.join(map(str, "
       "p.shape)))\n"
       "    for n, b in m.named_buffers(): print('REF', name, 'B', n, ','.join(map(str, "
       "b.shape)))\n"
       "    print('REF', name, 'C10', sum(p.numel() for p in m.parameters()))\n"
       "    print('REF', name, 'C1000', sum(p.numel() for p in "
       "fix(build(num_classes=1000)).parameters()))\n";
  return s;
}

std::map<std::string, Reference> parse(const std::vector<std::string>& lines) {
  std::map<std::string, Reference> refs;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string model, tag, name, shape;
    in >> model >> tag;
    Reference& ref = refs[model];
    if (tag == "P" || tag == "B") {
      in >> name >> shape;  // a scalar (num_batches_tracked) has an empty shape
      (tag == "P" ? ref.parameters : ref.buffers)[name] = shape;
    } else if (tag == "C10") {
      in >> ref.count10;
    } else if (tag == "C1000") {
      in >> ref.count1000;
    }
  }
  return refs;
}

void expect_same_structure(const std::string& name, const std::string& stem, const Reference& ref) {
  SCOPED_TRACE(name + " (" + stem + " stem)");
  ASSERT_FALSE(ref.parameters.empty()) << "no reference output for " << name;

  ModelConfig config;
  config.num_classes = 10;
  config.stem = stem_from_name(stem, "test stem");
  torch::nn::AnyModule model = create_model(name, config);
  ShapeMap parameters, buffers;
  for (const auto& item : model.ptr()->named_parameters()) {
    parameters[item.key()] = shape_key(item.value());
  }
  for (const auto& item : model.ptr()->named_buffers()) {
    buffers[item.key()] = shape_key(item.value());
  }
  EXPECT_EQ(parameters, ref.parameters) << name << ": parameter names/shapes differ";
  EXPECT_EQ(buffers, ref.buffers) << name << ": buffer names/shapes differ";

  EXPECT_EQ(count_parameters(*model.ptr()), ref.count10);
  const ModelInfo& info = find_model(name);
  EXPECT_EQ(model_parameter_count(info, config), ref.count10) << "formula at 10 classes";
  config.num_classes = 1000;
  EXPECT_EQ(model_parameter_count(info, config), ref.count1000) << "formula at 1000 classes";
}

// One Python run for a family (a Python start with torchvision costs seconds; one per model
// made these tests a minute and a half of CI), each model checked under its own trace.
#define DDPX_EXPECT_FAMILY(stem, ...)                                                 \
  do {                                                                                \
    const std::vector<std::string> names = {__VA_ARGS__};                             \
    DDPX_RUN_TORCHVISION(run, reference_script(names, std::string(stem) == "cifar")); \
    const auto refs = parse(run.lines);                                               \
    for (const auto& n : names) {                                                     \
      auto it = refs.find(n);                                                         \
      expect_same_structure(n, stem, it == refs.end() ? Reference{} : it->second);    \
    }                                                                                 \
  } while (0)

TEST(ZooStructureTest, ResNetsMatchTorchvisionsStateDictAndParameterCounts) {
  DDPX_EXPECT_FAMILY("imagenet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                     "wide_resnet50_2", "resnext50_32x4d");
}

TEST(ZooStructureTest, VggsAndMobileNetV2MatchTorchvisionsStateDictAndParameterCounts) {
  DDPX_EXPECT_FAMILY("imagenet", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn",
                     "vgg19", "vgg19_bn", "mobilenet_v2");
}

TEST(ZooStructureTest, DenseNetsAndMobileNetV3sMatchTorchvisionsStateDictAndParameterCounts) {
  DDPX_EXPECT_FAMILY("imagenet", "densenet121", "densenet161", "densenet169", "densenet201",
                     "mobilenet_v3_small", "mobilenet_v3_large");
}

TEST(ResNetCifarStemTest, KeepsTorchvisionKeysAndCountsWithSmallFirstConvolution) {
  DDPX_EXPECT_FAMILY("cifar", "resnet18", "resnet50");
}

}  // namespace
}  // namespace ddpx::models
