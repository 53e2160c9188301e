// What a GPU user meets that can be shown on a machine without a GPU. A checkpoint written on a
// GPU, used on a host without one (tests/fixtures/checkpoint: its float tensors recorded on
// cuda:0, as a GPU run of ddpx writes them): `--resume auto` goes on from it instead of skipping
// it as undecodable and training from scratch, and `ddpx export` writes host tensors that
// torch.load reads without map_location. A world of one with its group forced
// (DDPX_FORCE_GROUP=1, how one GPU runs DDP through NCCL) trains as a run without DDP. A GPU
// assigned to a worker that libtorch cannot see is named, not silently replaced by the CPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>

#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::run_command;
using test::shell_quote;

bool torch_sees_a_gpu() { return torch::cuda::is_available(); }

std::string fixture() {
  return test::source_dir() + "/tests/fixtures/checkpoint/mlp_cuda0_epoch1.ddpx";
}

// The settings the fixture was trained with (tests/fixtures/checkpoint/SOURCES.md).
const std::string kModel =
    "--model mlp --dataset synthetic --synthetic_image 4 --synthetic_classes 2 --batch_size 16 "
    "--momentum 0 --threads 1 --limit_test_batches 1 --no_progress ";
const std::string kCpuTrain = "train --device cpu --synthetic_size 32 " + kModel;

TEST(GpuPathsOnCpuTest, ResumeAutoGoesOnFromAGpuCheckpointOnTheCpu) {
  test::TempDir dir;
  const std::string save_dir = dir.file("ckpt");
  std::filesystem::create_directories(save_dir);
  std::filesystem::copy_file(fixture(), train::checkpoint_path(save_dir, 1));
  auto r = run_command(
      test::ddpx_command(kCpuTrain + "--num_epochs 2 --resume auto --save_dir " + save_dir), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("skipping checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("resumed from " + train::checkpoint_path(save_dir, 1) + " after 1 epochs"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Epoch - 0/2"), std::string::npos) << "trained again from scratch\n"
                                                             << r.output;
  EXPECT_NE(r.output.find("Epoch - 1/2"), std::string::npos) << r.output;
}

TEST(GpuPathsOnCpuTest, ExportOfAGpuCheckpointLoadsInPyTorchWithoutMapLocation) {
  test::TempDir dir;
  const std::string out = dir.file("weights.pt");
  auto exported =
      run_command(test::ddpx_command("export --checkpoint " + fixture() + " --out " + out), 120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  // The exported weights are the checkpoint's (read by PyTorch from the fixture's archive, put
  // on the host by map_location) and every one is a host tensor.
  auto py = test::run_python(
      "import io, torch\n"
      "sd = torch.load(" +
      shell_quote(out) +
      ")\n"
      "raw = open(" +
      shell_quote(fixture()) +
      ", 'rb').read()[24:]\n"
      "ckpt = torch.jit.load(io.BytesIO(raw), map_location='cpu')\n"
      "assert all(t.device.type == 'cpu' for t in sd.values()), {k: t.device for k, t in "
      "sd.items()}\n"
      "assert torch.equal(sd['fc1.weight'], ckpt.model.fc1.weight)\n"
      "assert torch.equal(sd['fc3.bias'], ckpt.model.fc3.bias)\n"
      "print('entries', len(sd))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("entries 6"), std::string::npos) << py.output;
}

// "Epoch - ..." and "Accuracy on test dataset - ..." lines, without the timings.
std::string results_of(const std::string& output) {
  std::string results;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    if (line.rfind("Epoch - ", 0) == 0) {
      size_t time = line.find(" time - "), loss = line.find(" || loss_train");
      size_t speed = line.find(" || images_per_sec");
      line = line.substr(0, time) + line.substr(loss, speed - loss);
      results += line + "\n";
    } else if (line.rfind("Accuracy on test dataset - ", 0) == 0) {
      results += line + "\n";
    }
    start = end + 1;
  }
  return results;
}

TEST(GpuPathsOnCpuTest, AForcedGroupOfOneTrainsAsARunWithoutDdp) {
  const std::string train = "train --device cpu --synthetic_size 64 --num_epochs 2 " + kModel;
  auto plain = run_command(test::ddpx_command(train), 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto forced = run_command("DDPX_FORCE_GROUP=1 " + test::ddpx_command(train), 300);
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(plain.output.find("world size 1 (none)"), std::string::npos) << plain.output;
  // The group of one (Gloo: shared memory is for two ranks or more); GroupOfOneTest checks that
  // DDP's reducer runs on it.
  EXPECT_NE(forced.output.find("world size 1 (gloo)"), std::string::npos)
      << "no process group was built\n"
      << forced.output;
  const std::string expected = results_of(plain.output);
  ASSERT_NE(expected, "") << plain.output;
  EXPECT_EQ(results_of(forced.output), expected) << forced.output;
}

TEST(GpuPathsOnCpuTest, AnAssignedGpuLibtorchCannotSeeIsNamedNotSilentlyReplaced) {
  if (torch_sees_a_gpu()) GTEST_SKIP() << "this machine has a GPU: libtorch sees it";
  // --device auto (the default): the GPU if one can be had.
  auto r = run_command("CUDA_VISIBLE_DEVICES=0 " +
                           test::ddpx_command("train --num_epochs 1 --synthetic_size 32 " + kModel),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CUDA_VISIBLE_DEVICES='0' gives this process a GPU, but libtorch sees "
                          "none"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ddpx doctor"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  rank 0: cpu"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
