// Logit parity with torchvision for every model in the registry (timm aliases and the small
// ViT included), in eval mode at 32 px, batch 2, 10 classes. One python process
// (zoo_reference.py) builds each torchvision model, draws every float tensor of its state_dict
// from torch's generator seeded with the tensor's index in sorted-name order, and writes the
// input and logits; this test draws the same tensors in C++ (libtorch's generator is the same
// one) and compares. Nothing but inputs and logits travels, so VGG (500 MB) and ViT-L (1.2 GB)
// cost no disk. A key or shape that differs from torchvision shifts the draws and fails.
// Real torchvision initialisation with a weight file: zoo_parity_test.cpp.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/weights.h"
#include "models/zoo/registry.h"
#include "reference.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

constexpr int64_t kNumClasses = 10;
// The smallest side every family takes: VGG's five pools and DenseNet's stride-4 stem and
// three pools need >= 32 (>= 29); vit_b_32 then runs on a single patch.
constexpr int64_t kImageSize = 32;
constexpr int kReferenceTimeoutS = 600;

// ddpx names that build another name's architecture; the reference is built under that name.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table{{"vit_base_patch16_224", "vit_b_16"},
                                                        {"vit_base_patch32_224", "vit_b_32"},
                                                        {"vit_large_patch16_224", "vit_l_16"}};
  return table;
}

std::string reference_name(const std::string& name) {
  const auto it = aliases().find(name);
  return it == aliases().end() ? name : it->second;
}

// Every registered model that torchvision has (mlp, the CIFAR ResNets and the GPTs are not
// torchvision's; cifar_resnet_test.cpp and gpt_test.cpp check the latter two).
std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const ModelInfo& info : model_table()) {
    if (info.family != "mlp" && info.family != "cifar_resnet" && info.family != "gpt" &&
        info.family != "bert")
      names.push_back(info.name);
  }
  return names;
}

// zoo_reference.py's fill(): seeded uniform draws in a range set by the tensor's role.
void fill_like_reference(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> sorted;  // the state_dict's keys in Python's sort order
  for (const auto& p : module.named_parameters()) sorted[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) sorted[b.key()] = b.value();
  torch::NoGradGuard no_grad;
  uint64_t index = 0;
  for (auto& [name, t] : sorted) {
    const uint64_t seed = index++;
    if (!t.is_floating_point()) continue;
    torch::manual_seed(seed);
    const auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with("running_var")) {
      t.uniform_(0.5, 1.5);
    } else if (t.dim() == 1 && ends_with("weight")) {
      t.uniform_(0.7, 1.3);
    } else if (t.dim() == 1) {
      t.uniform_(-0.1, 0.1);
    } else if (name == "class_token" || name == "encoder.pos_embedding") {
      t.uniform_(-0.5, 0.5);
    } else {
      const double bound = std::sqrt(6.0 / static_cast<double>(t.numel() / t.size(0)));
      t.uniform_(-bound, bound);
    }
  }
}

double rng_fingerprint() {
  torch::manual_seed(0);
  return torch::empty({1000}).uniform_(-1, 1).to(torch::kDouble).sum().item<double>();
}

class ZooParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  // One python process writes references for the models whose tests are selected to run.
  static void SetUpTestSuite() {
    torch::set_num_threads(1);  // as zoo_reference.py: the same summation order on both sides
    dir_ = std::make_unique<test::TempDir>();
    std::string specs;
    const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    for (int i = 0; suite != nullptr && i < suite->total_test_count(); ++i) {
      const ::testing::TestInfo* info = suite->GetTestInfo(i);
      if (!info->should_run()) continue;
      const std::string test = info->name();  // "LogitsMatchTorchvision/<model>"
      const std::string name = reference_name(test.substr(test.rfind('/') + 1));
      const std::string spec = "'" + name + ":" + std::to_string(kImageSize) + "'";
      if (specs.find(spec) == std::string::npos) specs += spec + ",";
    }
    run_ = std::make_unique<test::TorchvisionRun>(test::run_torchvision(
        "import runpy\n"
        "runpy.run_path('" +
            test::source_dir() + "/tests/models/zoo_reference.py')['main']('" + dir_->path() +
            "', [" + specs + "])\n",
        kReferenceTimeoutS));
  }
  static void TearDownTestSuite() {
    run_.reset();
    dir_.reset();
  }

  static std::unique_ptr<test::TempDir> dir_;
  static std::unique_ptr<test::TorchvisionRun> run_;
};

std::unique_ptr<test::TempDir> ZooParityTest::dir_;
std::unique_ptr<test::TorchvisionRun> ZooParityTest::run_;

TEST_P(ZooParityTest, LogitsMatchTorchvision) {
  DDPX_SKIP_WITHOUT_TOOL(run_->available)
      << "DDPX_PYTHON lacks torch/torchvision (scripts/python-env --tests installs them) for "
         "reference data";
  ASSERT_FALSE(run_->lines.empty()) << "zoo_reference.py printed nothing";
  const std::string& first = run_->lines.front();  // "rng <python's fingerprint>"
  ASSERT_EQ(first.rfind("rng ", 0), 0u) << "unexpected first line: " << first;
  ASSERT_EQ(std::stod(first.substr(4)), rng_fingerprint())
      << "the Python torch and libtorch draw different numbers from the same seed; this test "
         "needs both from the same PyTorch release";

  const std::string name = GetParam();
  const std::string io_path = dir_->file(reference_name(name) + ".pt");
  torch::nn::AnyModule model =
      create_model(name, ModelConfig{kNumClasses, kImageSize, Stem::kImagenet});
  fill_like_reference(*model.ptr());
  const auto io = read_state_dict(io_path);
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor y = model.forward(io.at("x"));  // (2, 10)
  test::expect_logits_match(y, io.at("y"), name + " at " + std::to_string(kImageSize) + " px");
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooParityTest, ::testing::ValuesIn(zoo_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ddpx::models
