// Weights between Python and ddpx: `--pretrained` reads what torch.save(model.state_dict())
// wrote (head re-initialised when the class count differs) and `ddpx export` writes what
// torchvision's load_state_dict accepts with every key matched.
#include <gtest/gtest.h>

#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::run_command;
using test::shell_quote;

using test::ddpx;

class WeightsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
        << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  }
  test::TempDir dir_;
  const std::string train_ =
      "train --model resnet18 --dataset synthetic --synthetic_size 64 "
      "--synthetic_image 32 --batch_size 16 --threads 1 --num_epochs 1 "
      "--limit_test_batches 1 ";
};

TEST_F(WeightsCliTest, ExportIsLoadedByTorchvisionWithAllKeysMatched) {
  auto trained = run_command(ddpx(train_ + "--save_dir " + dir_.file("ckpt")), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::string out = dir_.file("weights.pt");
  auto exported = run_command(
      ddpx("export --checkpoint " + train::checkpoint_path(dir_.file("ckpt"), 1) + " --out " + out),
      120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto py = test::run_python(
      "import torch, torchvision\n"
      "m = torchvision.models.resnet18(num_classes=10)\n"
      "sd = torch.load(" +
      shell_quote(out) +
      ")\n"
      "r = m.load_state_dict(sd)\n"
      "print('missing', len(r.missing_keys), 'unexpected', len(r.unexpected_keys))\n"
      "print('keys', len(sd))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("missing 0 unexpected 0"), std::string::npos) << py.output;
  EXPECT_NE(py.output.find("keys 122"), std::string::npos)
      << "resnet18 state_dict has 122 entries\n"
      << py.output;
}

TEST_F(WeightsCliTest, PretrainedLoadsATorchvisionStateDict) {
  std::string weights = dir_.file("tv.pth");
  auto py = test::run_python(
      "import torch, torchvision\ntorch.manual_seed(7)\n"
      "m = torchvision.models.resnet18(num_classes=10)\n"
      "torch.save(m.state_dict(), " +
      shell_quote(weights) + ")\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  // A learning rate of ~0 leaves the loaded parameters as they were.
  auto r = run_command(ddpx(train_ + "--pretrained " + weights +
                            " --learning_rate 1e-30 --weight_decay 0 --save_dir " + dir_.file("c")),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loaded 122 pretrained tensors"), std::string::npos) << r.output;
  std::string exported = dir_.file("back.pt");
  ASSERT_EQ(run_command(ddpx("export --checkpoint " + train::checkpoint_path(dir_.file("c"), 1) +
                             " --out " + exported),
                        120)
                .exit_code,
            0);
  auto compare = test::run_python(
      "import torch\na = torch.load(" + shell_quote(weights) + ")\nb = torch.load(" +
      shell_quote(exported) +
      ")\n"
      "d = max((a[k].float() - b[k].float()).abs().max().item() for k in a if 'running' not in k "
      "and 'num_batches' not in k)\nprint('maxdiff', d)\nassert d < 1e-6, d\n");
  EXPECT_EQ(compare.exit_code, 0) << compare.output;
}

TEST_F(WeightsCliTest, PretrainedWithAnotherClassCountReinitialisesOnlyTheHead) {
  std::string weights = dir_.file("tv1000.pth");
  auto py = test::run_python(
      "import torch, torchvision\n"
      "m = torchvision.models.resnet18(num_classes=1000)\n"
      "torch.save(m.state_dict(), " +
      shell_quote(weights) + ")\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto r = run_command(ddpx(train_ + "--pretrained " + weights), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loaded 120 pretrained tensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("head 'fc'"), std::string::npos) << r.output;
}

TEST_F(WeightsCliTest, PretrainedForAnotherModelListsTheMismatches) {
  std::string weights = dir_.file("r34.pth");
  auto py = test::run_python(
      "import torch, torchvision\n"
      "torch.save(torchvision.models.resnet34(num_classes=10).state_dict(), " +
      shell_quote(weights) + ")\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto r = run_command(ddpx(train_ + "--pretrained " + weights), 300);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("layer1.2"), std::string::npos) << "an unexpected key is named\n"
                                                          << r.output;
}

}  // namespace
}  // namespace ddpx
