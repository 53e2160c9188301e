// Every benchmark runs once at a tiny size so it cannot rot; the figures' sizes are not checked
// (they live in docs/performance.md), only that each program runs, computes right (GEMM's
// products against a reference) and prints its table correctly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "bench/gemm.h"
#include "distributed/peak_flops.h"
#include "e2e/token_fixture.h"
#include "models/gpt.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx;

// The seed's GEMM lines: every product checked against the fp64 reference (so a wrong multiply
// fails here), and a GFLOPS figure written with thousands separators that is 2mnk/t of the
// run's own printed time per multiply and its m, n, k.
TEST(BenchSmokeTest, GemmPrintsTheSeedsLines) {
  for (const char* dtype : {"fp32", "bf16", "fp64"}) {
    auto r = run_command(
        ddpx(std::string("bench gemm --device cpu --size 96 --iterations 3 --warmup 1 --dtype ") +
             dtype),
        120);
    ASSERT_EQ(r.exit_code, 0) << dtype << "\n" << r.output;
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex(R"(\nDevice: cpu \(.+\), [0-9]+ threads\n)"
                             R"(Device count: [0-9]+ GPU\(s\) visible; measured on cpu\n)")))
        << r.output;
    // The seed's lines in the seed's order, then the share of the peak.
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex("\nDevice: [^\n]*\nDevice count: [^\n]*\nTotal time: [^\n]*\n"
                             "Successful iterations: [^\n]*\nSuccess rate: [^\n]*\n"
                             "Average performance: [^\n]*\nPeak: [^\n]*\n")))
        << r.output;
    EXPECT_NE(r.output.find("\nSuccessful iterations: 3/3 ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\nSuccess rate: 100.00%\n"), std::string::npos) << r.output;
    std::smatch total;
    ASSERT_TRUE(std::regex_search(r.output, total, std::regex(R"(\nTotal time: ([0-9.]+) ms)")))
        << r.output;
    const double total_ms = std::stod(total[1]);
    EXPECT_GT(total_ms, 0.0) << r.output;
    std::smatch gflops;
    ASSERT_TRUE(std::regex_search(
        r.output, gflops,
        std::regex(R"(\nAverage performance: ([0-9]{1,3}(,[0-9]{3})*\.[0-9]{2}) GFLOPS \(.*, )"
                   R"([a-z0-9]+ ([0-9]+)x([0-9]+)x([0-9]+)\))")))
        << "digits grouped by commas\n"
        << r.output;
    std::string digits = gflops[1];
    digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
    const double value = std::stod(digits);
    const double m = std::stod(gflops[3]), n = std::stod(gflops[4]), k = std::stod(gflops[5]);
    EXPECT_EQ(m * n * k, 96.0 * 96 * 96) << "--size 96\n" << r.output;
    // 2mnk flops a multiply over the mean time of the 3 timed ones. The total is printed to
    // 0.0005 ms, so the figure derived from it is known to 0.0005/total of itself, plus the
    // GFLOPS' own rounding. (Mutation run: the time doubled in src/bench/gemm.cpp's figure fails
    // it for every dtype.)
    const double expected = 2 * m * n * k / (total_ms / 3 * 1e-3) / 1e9;
    EXPECT_NEAR(value, expected, expected * (0.001 + 0.0006 / total_ms) + 0.01)
        << "GFLOPS is not 2mnk/t of the printed time\n"
        << r.output;
  }
}

TEST(BenchSmokeTest, GemmGroupsThousands) {
  EXPECT_EQ(bench::with_thousands(83090.857), "83,090.86");
  EXPECT_EQ(bench::with_thousands(6936.11), "6,936.11");
  EXPECT_EQ(bench::with_thousands(999.994), "999.99");
  EXPECT_EQ(bench::with_thousands(1234567.0), "1,234,567.00");
  EXPECT_EQ(bench::with_thousands(0.5), "0.50");
  EXPECT_EQ(bench::with_thousands(999999.999), "1,000,000.00") << "rounding carries a digit";
  EXPECT_EQ(bench::with_thousands(-1234.5), "-1,234.50");
  EXPECT_EQ(bench::with_thousands(100000.0), "100,000.00");
}

// The GPU form of the lines, from a result as an H100 would give it (no GPU needed to check
// the formatting): the driver's name, the device count, GFLOPS grouped by thousands, and the
// share of the peak the table holds for that exact name.
TEST(BenchSmokeTest, GemmGpuLinesCarryTheCountThousandsAndShareOfPeak) {
  bench::GemmOptions options;
  options.warmup = 3;
  bench::GemmResult r;
  r.device = "NVIDIA H100 80GB HBM3";
  r.device_line =
      "cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB (0.5 GiB in use), 132 multiprocessors, "
      "compute capability 9.0";
  r.measured_on = "cuda:0";
  r.visible_gpus = 8;
  r.dtype = "bf16";
  r.m = r.n = r.k = 8192;
  r.iterations = r.successful = 20;
  r.tolerance = 2e-2;
  r.worst_error = 1.5e-3;
  r.seconds_per_iteration = 2.0 * 8192.0 * 8192.0 * 8192.0 / 83090.857e9;
  r.total_seconds = 20 * r.seconds_per_iteration;
  r.tflops = 83.090857;
  auto peak = dist::gpu_peak(r.device, r.dtype);
  ASSERT_TRUE(peak.has_value());
  r.peak_tflops = peak->tflops;
  r.peak_basis = "published dense peak of the " + peak->label;
  const std::string text = bench::format_gemm(options, r);
  EXPECT_NE(text.find("\nDevice: cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nDevice count: 8 GPU(s) visible; measured on cuda:0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nTotal time: 264.653 ms (13.233 ms per multiply)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nSuccessful iterations: 20/20 ("), std::string::npos) << text;
  EXPECT_NE(text.find("\nSuccess rate: 100.00%\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nAverage performance: 83,090.86 GFLOPS (83.09 TFLOP/s, bf16 "
                      "8192x8192x8192)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nPeak: 989.4 TFLOP/s (published dense peak of the H100 SXM); achieved "
                      "8.4% of it\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.rfind("# ddpx bench gemm: C = A x B, m 8192 n 8192 k 8192, bf16 on NVIDIA H100 "
                       "80GB HBM3, 20 iterations after 3 warm-up\n",
                       0),
            0u)
      << text;
}

TEST(BenchSmokeTest, AllreduceTableHasNoWrongValuesOnEitherTransport) {
  for (const char* transport : {"shm --buffer shared", "shm", "gloo"}) {
    test::TempDir dir;
    auto r =
        run_command(ddpx(std::string("run 2 --log_dir ") + dir.path() +
                         " -- bench allreduce -b 1024 -e 65536 -f 8 -n 2 --transport " + transport),
                    120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("# Avg bus bandwidth"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("     65536"), std::string::npos) << "last row present\n" << r.output;
  }
}

// The figure compared with PyTorch is ddpx train's own loop (its header and optimizer line are
// the trainer's), synchronized only at the window's ends, with the loader threads asked for.
TEST(BenchSmokeTest, TrainTimesDdpxTrainsOwnLoopWithTheLoaderWorkersAskedFor) {
  test::TempDir dir;
  auto r = run_command(ddpx("run 2 --log_dir " + dir.path() +
                            " -- bench train --model mlp --image_size 8 --batch_size 4 --steps 3 "
                            "--warmup 1 --workers 2 --json " +
                            dir.file("out.json")),
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer sgd lr 0.01 momentum 0.9"), std::string::npos)
      << "ddpx train's header: the trainer ran\n"
      << r.output;
  EXPECT_NE(r.output.find("loop: ddpx train's (train/trainer.cpp), 3 steps timed after 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("| sync: window ends (a barrier and a device sync before the first "
                          "timed step, a device sync after the last) | loader: 2 worker "
                          "thread(s) per rank"),
            std::string::npos)
      << r.output;
  auto json = run_command("cat " + dir.file("out.json"), 10);
  EXPECT_NE(json.output.find("\"loop\":\"trainer\""), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"loader_workers\":2"), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"sync\":\"window ends\""), std::string::npos) << json.output;

  // Flags of the phases loop given to ddpx train's loop would be ignored: a usage error.
  for (const char* flag : {"--optimizer_step libtorch", "--bucket_mb 4"}) {
    auto bad = run_command(ddpx(std::string("bench train --model mlp ") + flag), 60);
    EXPECT_EQ(bad.exit_code, 2) << flag << "\n" << bad.output;
    EXPECT_NE(bad.output.find("add --loop phases"), std::string::npos) << bad.output;
  }
}

// A GPT is timed on token windows of --seq_len (the old bench fed it a 3x32x32 image), with the
// LM recipe's AdamW, counting tokens and nanoGPT's FLOPs a token; what cannot work is refused in
// one line naming the flag.
TEST(BenchSmokeTest, TrainTimesAGptOnTokenWindowsWithAdamw) {
  test::TempDir dir;
  test::write_char_tokens(dir.path());
  auto r =
      run_command(ddpx("bench train --model gpt-nano --dataset tokens --data_dir " + dir.path() +
                       " --seq_len 16 --batch_size 2 --steps 2 --warmup 1 --threads 1 --json " +
                       dir.file("out.json")),
                  120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer adamw lr 0.001"), std::string::npos)
      << "the LM recipe's optimizer\n"
      << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("gpt-nano \\(16 tokens a window, vocabulary "
                                           "([0-9]+)\\)")))
      << r.output;
  models::GptOptions gpt;  // gpt-nano: 4 layers, 4 heads, 128 wide, context 64
  gpt.vocab_size = std::stoll(m[1]);
  gpt.block_size = 64;
  gpt.n_layer = gpt.n_head = 4;
  gpt.n_embd = 128;
  const double mflop = models::gpt_training_flops_per_token(gpt, 16) / 3 / 1e6;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex("model: ([0-9.]+) MFLOP forward per token \\(training 3x: 6N")))
      << r.output;
  EXPECT_NEAR(std::stod(m[1]), mflop, 1e-3) << r.output;
  EXPECT_NE(r.output.find("tokens/s (all ranks): "), std::string::npos) << r.output;
  auto json = run_command("cat " + dir.file("out.json"), 10);
  EXPECT_NE(json.output.find("\"tokens_per_sec\""), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"seq_len\":16"), std::string::npos) << json.output;

  // --no_bias times the GPT `ddpx train --no_bias` trains (nanoGPT's bias=False): its header says
  // so and the FLOPs a token lose the biases' 6 a parameter.
  auto no_bias =
      run_command(ddpx("bench train --model gpt-nano --dataset tokens --data_dir " + dir.path() +
                       " --seq_len 16 --batch_size 2 --steps 2 --warmup 1 --threads 1 --no_bias"),
                  120);
  ASSERT_EQ(no_bias.exit_code, 0) << no_bias.output;
  EXPECT_NE(no_bias.output.find("vocabulary " + std::to_string(gpt.vocab_size) + ", no biases)"),
            std::string::npos)
      << no_bias.output;
  gpt.bias = false;
  ASSERT_TRUE(
      std::regex_search(no_bias.output, m, std::regex("model: ([0-9.]+) MFLOP forward per token")))
      << no_bias.output;
  EXPECT_NEAR(std::stod(m[1]), models::gpt_training_flops_per_token(gpt, 16) / 3 / 1e6, 1e-3)
      << no_bias.output;

  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--model gpt-nano", "add --dataset tokens"},
           {"--model gpt-nano --dataset tokens --data_dir " + dir.path() + " --loop phases",
            "drop --loop phases"},
           {"--model mlp --dataset tokens --data_dir " + dir.path(), "add --model gpt-nano"}}) {
    auto bad = run_command(ddpx("bench train " + flags), 60);
    EXPECT_EQ(bad.exit_code, 2) << flags << "\n" << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << flags << "\n" << bad.output;
  }
}

// A pipeline's bench: every rank's bubble and activations held over the timed steps only, in the
// output and the JSON; under 1F1B rank r holds at most P - r micro-batches of activations.
TEST(BenchSmokeTest, TrainReportsAPipelinesBubbleOverTheTimedSteps) {
  test::TempDir dir;
  auto r = run_command(ddpx("run 2 --log_dir " + dir.path() +
                            " -- bench train --model mlp --image_size 8 --batch_size 8 --steps 3 "
                            "--warmup 1 --pipeline_parallel 2 --microbatches 4 --json " +
                            dir.file("out.json")),
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("over the timed steps, pipeline bubble \\(idle share of each rank's forward and "
                 "backward\\) by rank: 0 ([0-9.]+)% \\| 1 ([0-9.]+)%; micro-batch activations "
                 "held at most: 0 ([0-9]+) \\| 1 ([0-9]+)")))
      << r.output;
  for (int i : {1, 2}) EXPECT_LT(std::stod(m[i]), 100.0) << r.output;
  EXPECT_EQ(std::stoi(m[3]), 2) << "1F1B's first stage holds P micro-batches\n" << r.output;
  EXPECT_EQ(std::stoi(m[4]), 1) << "its last stage one\n" << r.output;
  auto json = run_command("cat " + dir.file("out.json"), 10);
  EXPECT_NE(json.output.find("\"plan_summary\":\"pipeline bubble"), std::string::npos)
      << json.output;
}

TEST(BenchSmokeTest, TrainSplitsTheStepWithEitherOptimizerStep) {
  for (std::string step : {"fused", "libtorch"}) {
    test::TempDir dir;
    auto r = run_command(ddpx("run 2 --log_dir " + dir.path() +
                              " -- bench train --loop phases --model mlp --image_size 8 "
                              "--batch_size 4 --steps 2 --warmup 1 --optimizer_step " +
                              step + " --json " + dir.file("out.json")),
                         120);
    ASSERT_EQ(r.exit_code, 0) << step << "\n" << r.output;
    EXPECT_NE(r.output.find("communication not hidden"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("| sync: none needed (CPU) | loader: 1 worker thread per rank, alone "),
              std::string::npos)
        << r.output;
    auto json = run_command("cat " + dir.file("out.json"), 10);
    EXPECT_NE(json.output.find("\"images_per_sec\""), std::string::npos) << json.output;
  }
}

TEST(BenchSmokeTest, BucketSweepScriptPrintsItsTable) {
  auto r = run_command("DDPX_BIN=" + test::ddpx_binary() + " " + test::source_dir() +
                           "/bench/bucket_sweep.sh 1 1 mlp",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| mlp | 25 (default) |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# mlp: the default is"), std::string::npos) << r.output;
}

TEST(BenchSmokeTest, PytorchPeerRuns) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  auto r = test::run_command(std::string(DDPX_PYTHON) + " " + test::source_dir() +
                                 "/bench/pytorch_train.py --steps 1 --warmup 1 --batch_size 4 "
                                 "--workers 0",
                             180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"images_per_sec\""), std::string::npos) << r.output;
}

TEST(BenchSmokeTest, CompareTrainScriptPrintsEveryRatio) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  // One round (ROUNDS=2 doubles part 1's eight process starts for two lines of arithmetic).
  auto r = run_command("ROUNDS=1 WARMUP=1 BATCH=8 DDPX_BIN=" + test::ddpx_binary() + " " +
                           test::source_dir() + "/bench/compare_train.sh 1",
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"ddpx    2 independent:", "pytorch 2 independent:", "ddpx DDP / pytorch DDP:",
        "ddpx step split", "start-up to first step: ddpx", "pytorch DDP + DataLoader",
        "ddpx data wait"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

// `ddpx bench loader` on a folder of real photographs: every image of the folder is a training
// sample, the timed images are the batches after the warmup, the batches are RandomResizedCrop's
// size, and the index is built on the first start and read from its cache on the second.
TEST(BenchSmokeTest, LoaderTimesTheImagePipelineAndReadsTheCachedIndexOnASecondStart) {
  test::PhotoFolder photos(6);  // 24 images
  const std::string json = photos.file("loader.json");
  const std::string command = "bench loader --data_dir " + photos.root() +
                              " --batch_size 4 --warmup 1 --image_size 32 --workers 2 --json " +
                              json;
  auto first = run_command(ddpx(command), 120);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(test::has(first.output, "bench loader: imagefolder " + photos.root() +
                                          " (24 images), 2 worker thread(s), batch 4"))
      << first.output;
  EXPECT_TRUE(test::has(first.output, "images/s: ")) << first.output;
  EXPECT_TRUE(test::has(first.output, "(built, then cached)")) << first.output;
  auto second = run_command(ddpx(command), 120);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(test::has(second.output, "(read from its cache)")) << second.output;
  std::ifstream in(json);
  std::string line;
  for (bool cached : {false, true}) {
    ASSERT_TRUE(std::getline(in, line)) << "one JSON line a run";
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["images"], 24) << line;
    EXPECT_EQ(j["timed_images"], 20) << "6 batches of 4, the first untimed\n" << line;
    EXPECT_EQ(j["image_size"], 32) << line;
    EXPECT_EQ(j["index_cached"], cached) << line;
    EXPECT_GT(j["images_per_sec"].get<double>(), 0) << line;
    EXPECT_GT(j["first_batch_s"].get<double>(), 0) << line;
    EXPECT_GT(j["peak_rss_mib"].get<double>(), 0) << line;
  }
  // A set that is not streamed images, and too few batches, each in one line naming the flag.
  auto r = run_command(ddpx("bench loader --dataset cifar10 --data_dir " + photos.root()), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(test::has(r.output, "--dataset cifar10: expected imagefolder, imagenet or shards"))
      << r.output;
  r = run_command(ddpx("bench loader --data_dir " + photos.root() + " --batch_size 64"), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(test::has(r.output, "too few for 2 warmup")) << r.output;
}

// The loader comparison on a small folder: every line and its ratios (the rate and CPU lines a
// ratio for each decode mode, the others one), nothing timed.
TEST(BenchSmokeTest, CompareLoaderScriptPrintsEveryRatio) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  auto r = run_command("IMAGES=24 BATCH=4 WARMUP=1 DDPX_PYTHON=" + test::python_binary() +
                           " DDPX_BIN=" + test::ddpx_binary() + " " + test::source_dir() +
                           "/bench/compare_loader.sh",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"images/s, 1 worker(s): ddpx fast ", "images/s, 2 worker(s): ddpx fast ",
        "CPU ms an image, 1 worker(s): ddpx fast ",
        "first batch, second start (1 worker(s)), from process start: ddpx ",
        "first batch, the loader's part (index, workers started, the first batch): ddpx ",
        "(index read from its cache", "CPU seconds to the first batch (all threads; ",
        "peak resident memory (fast), 2 worker(s), summed over 3 pytorch",
        "PSS at the end, 2 worker(s): ddpx "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  const auto count = [&](const char* pattern) {
    std::regex re(pattern);
    return std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), re),
                         std::sregex_iterator());
  };
  EXPECT_EQ(count(R"(\| ratio fast [0-9]+\.[0-9]{2}x, exact [0-9]+\.[0-9]{2}x)"), 4) << r.output;
  EXPECT_EQ(count(R"(\| ratio [0-9]+\.[0-9]{2}x)"), 5) << r.output;
}

// The end-to-end comparison on an image folder at a tiny size (crop 32, 2 images a rank, 2 timed
// steps): ddpx's 2 ranks and PyTorch's 2 DDP ranks each train and are timed, the images/s line
// carries the ratio, and each side's data wait is a share of its own step; nothing timed.
TEST(BenchSmokeTest, CompareImageTrainScriptPrintsBothSidesAndTheirDataWait) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision"))
      << "needs torchvision in DDPX_PYTHON (scripts/python-env --tests)";
  auto r = run_command("IMAGES=32 CROP=32 BATCH=2 STEPS=2 WARMUP=1 DDPX_PYTHON=" +
                           test::python_binary() + " DDPX_BIN=" + test::ddpx_binary() + " " +
                           test::source_dir() + "/bench/compare_image_train.sh",
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex(R"(images/s, 2 ranks: ddpx ([0-9.]+) \| pytorch DDP \+ )"
                                           R"(DataLoader ([0-9.]+) \| ratio ([0-9]+\.[0-9]{2})x)")))
      << r.output;
  const double ddpx_rate = std::stod(m[1]), pytorch_rate = std::stod(m[2]);
  EXPECT_GT(ddpx_rate, 0) << r.output;
  EXPECT_GT(pytorch_rate, 0) << r.output;
  // The rates are printed to 0.1, so their quotient is known to within about 1%.
  EXPECT_NEAR(std::stod(m[3]), ddpx_rate / pytorch_rate, 0.02 * ddpx_rate / pytorch_rate + 0.01)
      << r.output;
  // Each side's wait is a part of its step: at most the whole of it, and its share printed.
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(R"(data wait a step: ddpx ([0-9.]+) ms of ([0-9.]+) ms \(([0-9.]+)%.*\| )"
                 R"(pytorch ([0-9.]+) ms of ([0-9.]+) ms \(([0-9.]+)%)")))
      << r.output;
  for (int side : {1, 4}) {
    const double wait = std::stod(m[side]), step = std::stod(m[side + 1]);
    EXPECT_GE(wait, 0) << r.output;
    EXPECT_LE(wait, step) << r.output;
    EXPECT_NEAR(std::stod(m[side + 2]), 100 * wait / step, 0.5) << r.output;
  }
}

// The language-model comparison at two steps on Debian's GPL: both rows, the ratios, the FLOPs
// (the peer's two ranks forked from one Python, FORK_PEERS: one torch import, not two).
TEST(BenchSmokeTest, CompareLmScriptPrintsBothSettingsAndTheirRatios) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torch"))
      << "needs torch in DDPX_PYTHON (scripts/python-env --tests)";
  auto r = run_command(
      "STEPS=2 RANKS=2 FORK_PEERS=1 TEXT=/usr/share/common-licenses/GPL-3 DDPX_PYTHON=" +
          test::python_binary() + " DDPX_BIN=" + test::ddpx_binary() + " " + test::source_dir() +
          "/bench/compare_lm.sh",
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"  1 process, 1 thread ", "  2 DDP ranks, 1 thread each ",
                           "# step time, one process: ddpx ", "MFLOP a token ("})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  std::regex ratio(R"( ([0-9]+\.[0-9]{2})x )");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), ratio),
                          std::sregex_iterator()),
            2)
      << r.output;
}

// The language-model layouts beside PyTorch's (DTensor TP, SP, pipelining, FSDP2 x TP) at two
// steps of a tiny batch on Debian's GPL: every layout's row with its two ratios (tokens/s and
// peak memory a rank), nothing timed; the peer's ranks of a layout forked from one Python
// (FORK_PEERS: 4 torch imports where 10 ranks would each import it).
TEST(BenchSmokeTest, CompareLmLayoutsScriptPrintsEveryLayoutAndItsRatios) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torch"))
      << "needs torch in DDPX_PYTHON (scripts/python-env --tests)";
  auto r = run_command(
      "STEPS=2 BATCH=4 SEQ=16 FORK_PEERS=1 TEXT=/usr/share/common-licenses/GPL-3 DDPX_PYTHON=" +
          test::python_binary() + " DDPX_BIN=" + test::ddpx_binary() + " " + test::source_dir() +
          "/bench/compare_lm_layouts.sh",
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* layout : {"TP2 ", R"(TP2 \+ SP )", "PP2 1F1B ", "DP2 x TP2, ZeRO-3 / FSDP2 "}) {
    std::regex row(std::string("\\n  ") + layout +
                   R"( *[0-9]+ +[0-9]+ +[0-9]+\.[0-9]{2}x .* [0-9]+\.[0-9]{2}x)");
    EXPECT_TRUE(std::regex_search(r.output, row)) << layout << "\n" << r.output;
  }
}

TEST(BenchSmokeTest, MemoryReportsAPeakAboveTheBaseline) {
  auto r =
      run_command(ddpx("bench memory --model mlp --image_size 8 --batch_size 2 --threads 1"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto value = [&](const std::string& key) {  // from the `memory key=value ...` line
    const size_t at = r.output.find(" " + key + "=");
    return at == std::string::npos ? -1.0 : std::stod(r.output.substr(at + key.size() + 2));
  };
  EXPECT_GT(value("baseline_mib"), 0.0) << r.output;
  EXPECT_GE(value("peak_mib"), value("baseline_mib")) << r.output;
}

}  // namespace
}  // namespace ddpx
