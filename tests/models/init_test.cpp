// Initial weights equal torchvision's, bit for bit: libtorch and the Python torch the tests run
// share one CPU generator, so the same seed, the same construction order and the same init rules
// (models/init.h) draw the same numbers. Checks every family that init_torchvision_weights
// serves (one member each, vgg's 500 MB left out); a rule, order or fan mode that differs
// changes the draws and fails.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "models/weights.h"
#include "models/zoo/registry.h"
#include "reference.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

const std::vector<std::string> kNames = {"resnet18", "densenet121", "mobilenet_v2",
                                         "mobilenet_v3_small", "efficientnet_b0"};

TEST(ZooInitTest, SameSeedGivesTorchvisionsInitialWeightsBitForBit) {
  test::TempDir dir;
  std::string script = "d = '" + dir.path() + "'\nfor name in [";
  for (const std::string& name : kNames) script += "'" + name + "', ";
  script +=
      "]:\n"
      "    torch.manual_seed(0)\n"
      "    m = getattr(torchvision.models, name)(num_classes=10)\n"
      "    torch.save(m.state_dict(), d + '/' + name + '.pt')\n"
      "print('REF ok', flush=True)\n";
  DDPX_RUN_TORCHVISION(run, script);
  ASSERT_EQ(run.lines.size(), 1u) << "reference script produced no output";

  for (const std::string& name : kNames) {
    torch::manual_seed(0);
    torch::nn::AnyModule model = create_model(name, ModelConfig{10, 224, Stem::kImagenet});
    const auto reference = read_state_dict(dir.file(name + ".pt"));
    int64_t compared = 0;
    for (const auto& p : model.ptr()->named_parameters()) {
      ASSERT_EQ(reference.count(p.key()), 1u) << name << ": " << p.key();
      EXPECT_TRUE(torch::equal(p.value(), reference.at(p.key())))
          << name << ": " << p.key() << " differs from torchvision's initial value";
      ++compared;
    }
    EXPECT_GT(compared, 0) << name;
  }
}

}  // namespace
}  // namespace ddpx::models
