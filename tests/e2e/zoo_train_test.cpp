// Every name in the zoo trains from `ddpx train --model NAME` with no size flag: the real binary
// on synthetic data of Fashion-MNIST's 28 px (the smallest native size; the ViTs, VGG and
// DenseNet get it resized to the 32 px they take, and the header says so), one step of batch 2
// with each model's default optimizer, then one test batch. Asserts the seed's epoch line with
// a finite loss and accuracy, the test accuracy line and the closing line. (32 px, CIFAR's,
// suits every model: FitImageSizeTest.)
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "models/zoo/registry.h"
#include "support/support.h"

namespace ddpx {
namespace {

constexpr int kTimeoutS = 300;  // vit_l_16 and VGG take seconds to build; a hang is a failure

// Every image classifier (the language models train on tokens: language_model_test.cpp,
// bert_test.cpp).
std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const models::ModelInfo& info : models::model_table()) {
    if (info.family != "gpt" && info.family != "bert") names.push_back(info.name);
  }
  return names;
}

class ZooTrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooTrainTest, TrainsOneStepWithAFiniteLoss) {
  const std::string name = GetParam();
  // Batch 2: BatchNorm in training needs more than one value per channel, and the ResNets'
  // last map is 1x1 at 28 px.
  const auto r = test::run_command(
      test::ddpx_binary() + " train --model " + name +
          " --dataset synthetic --synthetic_size 4 --synthetic_image 28 --batch_size 2"
          " --num_epochs 1 --limit_train_batches 1 --limit_test_batches 1 --threads 1",
      kTimeoutS);
  ASSERT_EQ(r.exit_code, 0) << name << ":\n" << r.output;
  std::smatch m;
  const std::regex epoch(
      R"(Epoch - 0/1: time - \S+s \|\| loss_train - (\S+) \|\| accuracy_train - (\S+))");
  ASSERT_TRUE(std::regex_search(r.output, m, epoch)) << name << ": no epoch line\n" << r.output;
  const double loss = std::stod(m[1].str());
  const double accuracy = std::stod(m[2].str());
  EXPECT_TRUE(std::isfinite(loss) && loss > 0.0) << name << ": loss_train " << m[1].str();
  EXPECT_TRUE(accuracy >= 0.0 && accuracy <= 1.0) << name << ": accuracy_train " << m[2].str();
  EXPECT_NE(r.output.find("Accuracy on test dataset - "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Training took "), std::string::npos) << r.output;
  const bool resized = models::fit_image_size(models::find_model(name), 28) != 28;
  EXPECT_EQ(r.output.find("images resized from 28x28 to 32x32: " + name) != std::string::npos,
            resized)
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(EveryModel, ZooTrainTest, ::testing::ValuesIn(zoo_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ddpx
