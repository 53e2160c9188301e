// ddpx beside PyTorch 2.x from the same environment (DDPX_PYTHON): torchrun starts ddpx workers
// that train as one job, under torchrun's environment contract and its restarts; and weights
// exported by ddpx give PyTorch the accuracy ddpx measured.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::run_command;
using test::shell_quote;

std::string torchrun() {
  return (std::filesystem::path(test::python_binary()).parent_path() / "torchrun").string();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kInteropTrain =
    " train --model resnet18 --dataset synthetic --synthetic_size 128 --synthetic_image 32 "
    "--batch_size 16 --threads 1 --num_epochs 1 --limit_test_batches 1 --no_progress";

class TorchrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DDPX_SKIP_WITHOUT_TOOL(std::filesystem::exists(torchrun()))
        << "no torchrun beside DDPX_PYTHON (" << torchrun() << ")";
  }
};

TEST_F(TorchrunTest, StartsDdpxWorkersThatTrainAsOneJob) {
  const int port = test::free_port();
  auto r =
      run_command(torchrun() + " --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " +
                      std::to_string(port) + " --no-python " + test::ddpx_binary() + kInteropTrain,
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 read torchrun's variables, joined the agent's store as a client, and alone printed
  // the seed's lines.
  EXPECT_NE(r.output.find("joined 2 ranks via 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(", torchrun)"), std::string::npos) << "the contract it read\n"
                                                             << r.output;
  EXPECT_EQ(count(r.output, "Epoch - 0/1"), 1) << r.output;
  EXPECT_EQ(count(r.output, "Accuracy on test dataset - "), 1) << r.output;
}

TEST_F(TorchrunTest, ARestartAfterAFailedWorkerTrainsToTheEnd) {
  // Rank 1 fails in the first attempt only; torchrun restarts the group, whose ranks meet again
  // in the same agent store (keys of the new attempt apart from the old ones).
  test::TempDir dir;
  const std::string script = dir.file("worker.sh");
  test::write_bytes(script,
                    "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then\n"
                    "  echo 'worker: rank 1 fails on purpose' >&2; exit 3\n"
                    "fi\n"
                    "exec " +
                        test::ddpx_binary() + kInteropTrain + "\n");
  const int port = test::free_port();
  auto r =
      run_command(torchrun() + " --nproc_per_node 2 --max_restarts 1 --master_addr 127.0.0.1 " +
                      "--master_port " + std::to_string(port) + " --no-python bash " + script,
                  300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 fails on purpose"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "Epoch - 0/1"), 1) << r.output;
}

// ResNet-18 trained briefly on Fashion-MNIST by ddpx, exported, then evaluated by torchvision's
// resnet18 on the same 512 test images with the same preprocessing: the same accuracy.
TEST(WeightsRoundTripTest, ExportedWeightsGivePyTorchTheSameTestAccuracy) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  test::TempDir dir;
  auto trained = run_command(
      test::ddpx_binary() +
          " train --model resnet18 --dataset fashion-mnist --normalize neg_one_one --no_flip "
          "--optimizer adamw --learning_rate 0.002 --batch_size 32 --limit_train_batches 20 "
          "--limit_test_batches 1 --num_epochs 1 "
          "--threads 2 --no_progress --save_dir " +
          dir.file("ckpt"),
      600);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(trained.output, m, std::regex("Accuracy on test dataset - ([0-9.]+)")))
      << trained.output;
  const double ddpx_accuracy = std::stod(m[1]);
  const std::string weights = dir.file("resnet18.pt");
  auto exported = run_command(test::ddpx_binary() + " export --checkpoint " +
                                  train::checkpoint_path(dir.file("ckpt"), 1) + " --out " + weights,
                              120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  auto py = test::run_python(R"(
import gzip, numpy as np, torch, torchvision
m = torchvision.models.resnet18(num_classes=10)
m.load_state_dict(torch.load()" +
                             shell_quote(weights) + R"(), strict=True)
m.eval()
d = )" + shell_quote(test::fashion_mnist_dir()) +
                             R"(
with gzip.open(d + '/t10k-images-idx3-ubyte.gz') as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:512]
with gzip.open(d + '/t10k-labels-idx1-ubyte.gz') as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)[:512]
x = (torch.from_numpy(x.astype(np.float32)) / 255 - 0.5) / 0.5
with torch.no_grad():
    pred = m(x.expand(-1, 3, -1, -1)).argmax(1)
print('accuracy %.6f' % (pred == torch.from_numpy(y.astype(np.int64))).float().mean().item())
)");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_TRUE(std::regex_search(py.output, m, std::regex("accuracy ([0-9.]+)"))) << py.output;
  const double torch_accuracy = std::stod(m[1]);
  EXPECT_GT(ddpx_accuracy, 0.5)
      << "20 AdamW steps of ResNet-18 learn Fashion-MNIST well past chance";
  // The same libtorch kernels on both sides: at most one of 512 images may round differently.
  EXPECT_NEAR(torch_accuracy, ddpx_accuracy, 1.0 / 512 + 1e-4)
      << "ddpx " << ddpx_accuracy << " vs PyTorch " << torch_accuracy;
}

// The line `ddpx export` prints is Python that loads the file: run as printed for the CIFAR stem
// (torchvision's ResNet with ddpx's 3x3 conv1 and no max-pool swapped in), and for ddpx's own
// MLP it says torchvision has no such model instead of naming one that does not exist.
TEST(WeightsRoundTripTest, TheExportLineIsPythonThatLoadsTheFile) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  test::TempDir dir;
  const std::string limits =
      "DDPX_EPOCHS=1 DDPX_MAX_STEPS=1 DDPX_MAX_TEST_BATCHES=1 "
      "DDPX_BATCH_SIZE=4 ";
  for (const std::string model : {"resnet18 --stem cifar", "mlp"}) {
    SCOPED_TRACE(model);
    const std::string ckpt = dir.file(model.substr(0, 4));
    auto trained =
        run_command("cd " + shell_quote(dir.path()) + " && " + limits +
                        test::ddpx_command("train --model " + model + " --save_dir " + ckpt),
                    300);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    auto exported =
        run_command("cd " + shell_quote(dir.path()) + " && " +
                        test::ddpx_command("export --checkpoint " +
                                           train::checkpoint_path(ckpt, 1) + " --out W.pt"),
                    120);
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    const size_t python = exported.output.find("in Python, ");
    if (model == "mlp") {
      EXPECT_EQ(python, std::string::npos) << exported.output;
      EXPECT_NE(exported.output.find("torchvision has no such model"), std::string::npos)
          << exported.output;
      continue;
    }
    ASSERT_NE(python, std::string::npos) << exported.output;
    std::string code = exported.output.substr(python + 11);
    code = code.substr(0, code.find('\n'));
    auto py = test::run_python("import os, torch, torchvision\nos.chdir(" +
                               shell_quote(dir.path()) + ")\n" + code +
                               "\nprint('loaded', sum(p.numel() for p in m.parameters()))\n");
    EXPECT_EQ(py.exit_code, 0) << code << "\n" << py.output;
    EXPECT_NE(py.output.find("loaded 11173962"), std::string::npos) << py.output;
  }
}

}  // namespace
}  // namespace ddpx
