// EfficientNet B0-B7 and ViT B/16, B/32, L/16 have torchvision's exact state_dict (names and
// shapes) and parameter counts at 10 and 1000 classes, like the rest of the zoo in
// zoo_structure_test.cpp. One Python process describes all eleven models (with initialisation
// stubbed out) instead of one per model: starting torchvision eleven times and initialising
// ViT-L in Python would cost tens of seconds.
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

struct Reference {
  ShapeMap parameters, buffers;
  int64_t count10 = -1, count1000 = -1;
};

const char* const kModels[] = {"efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
                               "efficientnet_b3", "efficientnet_b4", "efficientnet_b5",
                               "efficientnet_b6", "efficientnet_b7", "vit_b_16",
                               "vit_b_32",        "vit_l_16"};

std::string shape_key(const torch::Tensor& t) {
  std::string out;
  for (int64_t d : t.sizes()) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

std::string reference_script() {
  std::string s =
      "nn.Conv2d.reset_parameters = lambda self: None\n"
      "nn.Linear.reset_parameters = lambda self: None\n"
      "nn.MultiheadAttention._reset_parameters = lambda self: None\n"
      "for f in ('kaiming_normal_', 'normal_', 'uniform_', 'xavier_uniform_', 'trunc_normal_'):\n"
      "    setattr(nn.init, f, lambda t, *a, **k: t)\n"
      "for name in [";
  for (const char* name : kModels) s += std::string("'") + name + "', ";
  s += "]:\n"
       "    build = getattr(torchvision.models, name)\n"
       "    m = build(num_classes=10)\n"
       "    for n, p in m.named_parameters(): print('REF', name, 'P', n, ','.join(map(str, "
       "p.shape)))\n"
       "    for n, b in m.named_buffers(): print('REF', name, 'B', n, ','.join(map(str, "
       "b.shape)))\n"
       "    print('REF', name, 'C10', sum(p.numel() for p in m.parameters()))\n"
       "    print('REF', name, 'C1000', sum(p.numel() for p in build().parameters()), "
       "flush=True)\n";
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

TEST(EfficientNetViTStructureTest, StateDictsAndParameterCountsMatchTorchvision) {
  DDPX_RUN_TORCHVISION(run, reference_script());
  const std::map<std::string, Reference> refs = parse(run.lines);
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    ASSERT_EQ(refs.count(name), 1u) << "no reference output for " << name;
    const Reference& ref = refs.at(name);
    ASSERT_FALSE(ref.parameters.empty());

    ModelConfig config;
    config.num_classes = 10;
    ShapeMap parameters, buffers;
    {
      torch::nn::AnyModule model = create_model(name, config);
      for (const auto& item : model.ptr()->named_parameters()) {
        parameters[item.key()] = shape_key(item.value());
      }
      for (const auto& item : model.ptr()->named_buffers()) {
        buffers[item.key()] = shape_key(item.value());
      }
      EXPECT_EQ(count_parameters(*model.ptr()), ref.count10) << "built model at 10 classes";
    }
    EXPECT_EQ(parameters, ref.parameters) << name << ": parameter names/shapes differ";
    EXPECT_EQ(buffers, ref.buffers) << name << ": buffer names/shapes differ";
    const ModelInfo& info = find_model(name);
    EXPECT_EQ(model_parameter_count(info, config), ref.count10) << "formula at 10 classes";
    config.num_classes = 1000;
    EXPECT_EQ(model_parameter_count(info, config), ref.count1000) << "formula at 1000 classes";
  }
}

}  // namespace
}  // namespace ddpx::models
