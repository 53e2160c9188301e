// `ddpx train` and `ddpx bench` on a GPU, as a user runs them (label gpu; each test skips with a
// message where this process sees no GPU, as in CI): bf16 and fp16 training with channels_last,
// checkpoints that cross between GPU and CPU (and a GPU's checkpoint resumed and exported where
// no GPU is visible), DDP through NCCL on one GPU (a world of one with its group forced), two
// workers sharing one GPU through Gloo, a clear out-of-memory line, the recipe options and the
// profiler's GPU times, the batch-size finder, and the GEMM benchmark against the peak table.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>
#include <fstream>
#include <iterator>
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

// What a checkpoint of a GPU run gives on a host without a GPU (here: the GPU hidden): `--resume
// auto` goes on from it, and `ddpx export` writes a file torch.load reads without map_location.
TEST(TrainGpuTest, AGpuCheckpointResumesAndExportsWhereNoGpuIsVisible) {
  SKIP_WITHOUT_GPU();
  test::TempDir temp;
  const std::string dir = temp.file("ckpt");
  const std::string common =
      " --batch_size 64 --limit_train_batches 20 --limit_test_batches 2 --no_progress "
      "--save_dir " +
      dir;
  auto a = run_command(ddpx_command("train --device cuda --num_epochs 1" + common), 600);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(
      "CUDA_VISIBLE_DEVICES= " + ddpx_command("train --num_epochs 2 --resume auto" + common), 600);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("Epoch - 0/2"), std::string::npos) << b.output;
  const std::string out = temp.file("w.pt");
  auto e = run_command(
      "CUDA_VISIBLE_DEVICES= " +
          ddpx_command("export --checkpoint " + dir + "/checkpoint_epoch0001.ddpx --out " + out),
      300);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto py = test::run_python(
      "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\nimport torch\n"
      "sd = torch.load('" +
      out +
      "')\n"
      "assert all(t.device.type == 'cpu' for t in sd.values())\n");
  EXPECT_EQ(py.exit_code, 0) << py.output;
}

// A world of one with its group forced (DDPX_FORCE_GROUP=1): on one GPU, DDP's buckets, ncclAvg,
// the broadcasts, SyncBatchNorm's all-reduces, fp16's cross-rank inf check and a comm hook all
// go through NCCL; the group is shut down at exit (NCCL warns about one that is not).
TEST(TrainGpuTest, WorldOfOneTrainsThroughNcclOnOneGpu) {
  SKIP_WITHOUT_GPU();
  for (const char* hook : {"allreduce", "bf16"}) {
    auto r = run_command(
        "DDPX_FORCE_GROUP=1 " + ddpx_command(kShort +
                                             " --device cuda --backend nccl --amp fp16 --sync_bn "
                                             "--clip_grad_norm 5 --comm_hook " +
                                             hook),
        600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("world size 1 (nccl/"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("statistics over 1 ranks"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("destroy_process_group"), std::string::npos)
        << "the process group was not shut down\n"
        << r.output;
    EXPECT_GT(printed_test_accuracy(r.output), 0.7) << hook << "\n" << r.output;
  }
}

TEST(TrainGpuTest, TwoWorkersShareOneGpuThroughGloo) {
  SKIP_WITHOUT_GPU();
  // --backend auto: the launcher tells the workers they share a GPU, and they take Gloo.
  auto r = run_command(ddpx_command("run 2 --gpus 0,0 -- " + kShort + " --device cuda"), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world size 2 (gloo"), std::string::npos) << r.output;
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
  EXPECT_NE(r.output.find("# GPU time: CUDA events"), std::string::npos) << r.output;
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

// A trial's peak is its own: the cache of the trials before it is emptied first, so batch 256
// peaks alike after 64 and 128 as alone.
TEST(TrainGpuTest, BatchSizeFinderTrialsDoNotCountThePreviousTrialsCache) {
  SKIP_WITHOUT_GPU();
  auto peak_of_256 = [](const std::string& output) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(output, m, std::regex("\\n +256 +[0-9.]+ +([0-9.]+) ")))
        << output;
    return m.empty() ? 0.0 : std::stod(m[1]);
  };
  const std::string tune =
      "tune batch_size --device cuda --model resnet50 --image_size 224 "
      "--steps 1 --max_batch 256 --start_batch ";
  auto alone = run_command(ddpx_command(tune + "256"), 600);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  auto after = run_command(ddpx_command(tune + "64"), 600);
  ASSERT_EQ(after.exit_code, 0) << after.output;
  EXPECT_NEAR(peak_of_256(after.output), peak_of_256(alone.output),
              0.05 * peak_of_256(alone.output))
      << alone.output << after.output;
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

// A GPT's epoch line ends with its MFU against the peak table, and the metrics file has it.
TEST(TrainGpuTest, AGptsEpochLineShowsItsMfu) {
  SKIP_WITHOUT_GPU();
  test::TempDir dir;
  auto tokenized = run_command(ddpx_command("data tokenize /usr/share/common-licenses/GPL-3 "
                                            "--tokenizer char --out " +
                                            dir.file("data")),
                               120);
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  auto r = run_command(
      ddpx_command("train --model gpt-nano --dataset tokens --data_dir " + dir.file("data") +
                   " --batch_size 64 --num_epochs 1 --limit_test_batches 1 "
                   "--device cuda --amp bf16 --no_progress --metrics_json " +
                   dir.file("metrics.jsonl")),
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MFU: "), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(\|\| mfu - ([0-9.]+)%)"))) << r.output;
  const double mfu = std::stod(m[1]);
  EXPECT_GT(mfu, 0.0) << r.output;
  EXPECT_LT(mfu, 100.0) << r.output;
  std::ifstream metrics(dir.file("metrics.jsonl"));
  const std::string json((std::istreambuf_iterator<char>(metrics)), {});
  EXPECT_NE(json.find("\"mfu\""), std::string::npos) << json;
}

}  // namespace
}  // namespace ddpx
