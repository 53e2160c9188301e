// The mlp smoke-test model: shape contract, parameter names and a clear error on a wrong size.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/zoo/registry.h"

namespace ddpx::models {
namespace {

TEST(MlpTest, MapsImagesToLogitsWithNamedLayers) {
  ModelConfig config;
  config.num_classes = 7;
  config.image_size = 12;
  auto model = create_model("mlp", config);
  torch::Tensor logits = model.forward(torch::randn({5, 3, 12, 12}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{5, 7}));
  auto params = model.ptr()->named_parameters();
  EXPECT_EQ(params["fc1.weight"].sizes(), (std::vector<int64_t>{256, 3 * 12 * 12}));
  EXPECT_TRUE(params.contains("fc3.bias"));
  EXPECT_EQ(count_parameters(*model.ptr()), 3 * 144 * 256 + 256 + 256 * 128 + 128 + 128 * 7 + 7);
}

TEST(MlpTest, WrongInputSizeIsAUsageError) {
  ModelConfig config;
  config.image_size = 12;
  auto model = create_model("mlp", config);
  try {
    model.forward(torch::randn({2, 3, 28, 28}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("432"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddpx::models
