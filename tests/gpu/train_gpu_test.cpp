// `ddpx train` and `ddpx bench` on a GPU, as a user runs them (label gpu; each test skips with a
// message where this process sees no GPU, as in CI): bf16 and fp16 training with channels_last,
// checkpoints that cross between GPU and CPU, two workers sharing one GPU through Gloo, a clear
// out-of-memory line, the recipe options and the profiler, the batch-size finder, and the GEMM
// benchmark against the peak table.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>
#include <regex>

#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx_command;
using test::printed_test_accuracy;

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to this process"

const std::string kShort =
    "train --num_epochs 1 --batch_size 128 --limit_train_batches 200 --limit_test_batches 10 "
    "--no_progress";

TEST(TrainGpuTest, Bf16ChannelsLastTrainsOnTheGpu) {
  SKIP_WITHOUT_GPU();
  auto r = run_command(ddpx_command(kShort + " --device cuda --amp bf16 --channels_last"), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  rank 0: cuda:0 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fused multi-tensor SGD on the device"), std::string::npos) << r.output;
  EXPECT_GT(printed_test_accuracy(r.output), 0.75) << r.output;
}

TEST(TrainGpuTest, Fp16WithLossScalingTrains) {
  SKIP_WITHOUT_GPU();
  auto r = run_command(ddpx_command(kShort + " --device cuda --amp fp16"), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(printed_test_accuracy(r.output), 0.75) << r.output;
}

TEST(TrainGpuTest, CheckpointsCrossBetweenGpuAndCpu) {
  SKIP_WITHOUT_GPU();
  for (auto [first, second] :
       {std::pair<std::string, std::string>{"cuda", "cpu"}, {"cpu", "cuda"}}) {
    test::TempDir temp;
    const std::string dir = temp.path();
    const std::string common =
        " --num_epochs 2 --batch_size 64 --limit_train_batches 20 --limit_test_batches 2 "
        "--no_progress --save_dir " +
        dir;
    // Epoch 1 on one device, killed after its checkpoint (--num_epochs 1), then epoch 2 on the
    // other.
    auto a = run_command(
        ddpx_command("train --device " + first + " --amp bf16" +
                     std::regex_replace(common, std::regex("--num_epochs 2"), "--num_epochs 1")),
        600);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = run_command(ddpx_command("train --device " + second + " --resume auto" + common), 600);
    ASSERT_EQ(b.exit_code, 0) << first << " -> " << second << "\n" << b.output;
    EXPECT_NE(b.output.find("Epoch - 1/2"), std::string::npos) << b.output;
  }
}

TEST(TrainGpuTest, TwoWorkersShareOneGpuThroughGloo) {
  SKIP_WITHOUT_GPU();
  auto r = run_command(
      ddpx_command("run 2 --gpus 0,0 -- " + kShort + " --device cuda --backend gloo"), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  rank 1: cuda:0 "), std::string::npos) << r.output;
  EXPECT_GT(printed_test_accuracy(r.output), 0.7) << r.output;
}

// The recipe options on GPU tensors: mixing on the device, EMA of device weights, SyncBatchNorm's
// all-reduces of CUDA tensors (two workers sharing one GPU through Gloo), and a profile with the
// GPU's kernels beside ddpx's ranges.
TEST(TrainGpuTest, RecipeOptionsAndTheProfilerRunOnTheGpu) {
  SKIP_WITHOUT_GPU();
  test::TempDir dir;
  auto r = run_command(
      ddpx_command("run 2 --gpus 0,0 -- " + kShort +
                   " --device cuda --backend gloo --amp bf16 --label_smoothing 0.1 --mixup 0.2 "
                   "--cutmix 1.0 --ema_decay 0.99 --sync_bn --clip_grad_norm 5 --profile " +
                   dir.file("prof") + " --profile_steps 3 --tensorboard " + dir.file("tb")),
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Accuracy on test dataset (EMA) - "), std::string::npos) << r.output;
  EXPECT_GT(printed_test_accuracy(r.output), 0.6) << r.output;
  auto py = test::run_python(
      "import json\n"
      "for r in range(2):\n"
      "    ev = json.load(open('" +
      dir.file("prof") +
      "/rank%d.trace.json' % r))['traceEvents']\n"
      "    assert any(e.get('cat') == 'kernel' for e in ev), 'no kernels'\n"
      "    assert any(e.get('name') == 'ddpx::backward' for e in ev)\n");
  EXPECT_EQ(py.exit_code, 0) << py.output;
}

TEST(TrainGpuTest, BatchSizeFinderStopsAtTheGpusMemory) {
  SKIP_WITHOUT_GPU();
  auto r = run_command(ddpx_command("tune batch_size --device cuda --model resnet50 --image_size "
                                    "224 --start_batch 64 --max_batch 65536 --steps 1"),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out of memory"), std::string::npos) << "doubling ran into the limit\n"
                                                               << r.output;
  EXPECT_NE(r.output.find("recommendation: --batch_size "), std::string::npos) << r.output;
}

TEST(TrainGpuTest, OutOfMemoryNamesModelBatchAndGpu) {
  SKIP_WITHOUT_GPU();
  auto r = run_command(ddpx_command("train --device cuda --model resnet152 --image_size 448 "
                                    "--batch_size 8192 --limit_train_batches 1 --no_progress"),
                       600);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("out of memory training --model resnet152 with --batch_size 8192"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("try --batch_size 4096"), std::string::npos) << r.output;
}

TEST(BenchGpuTest, GemmInEachDtypeAgainstThePeakTable) {
  SKIP_WITHOUT_GPU();
  for (const char* dtype : {"fp32", "tf32", "bf16", "fp16"}) {
    auto r = run_command(
        ddpx_command(std::string("bench gemm --device cuda --size 4096 --dtype ") + dtype), 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string(", ") + dtype + " on "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("Peak: "), std::string::npos) << r.output;
  }
}

TEST(BenchGpuTest, TrainBenchReportsMfuAndPeakMemory) {
  SKIP_WITHOUT_GPU();
  auto r =
      run_command(ddpx_command("bench train --device cuda --amp bf16 --channels_last --model "
                               "resnet50 --image_size 224 --batch_size 64 --steps 10 --warmup 3"),
                  600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peak GPU memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| sync: window ends"), std::string::npos)
      << "ddpx train's loop, synchronized as the PyTorch peer\n"
      << r.output;
  EXPECT_NE(r.output.find("GFLOP forward per image"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
