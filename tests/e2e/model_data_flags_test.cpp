// The model and data flags are one group (cli/model_data_flags.h): a train command becomes a
// tune or bench command by changing the verb, and tune and bench take the dataset's shape.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "optim/amp.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx_command;
using test::run_command;

using test::has;

// `--dataset fashion-mnist` gives tune the dataset's 28x28 images (random ones: no files are
// read), where the default synthetic data is 32x32.
TEST(ModelDataFlagsTest, TuneTakesTheDatasetsShape) {
  auto r = run_command(ddpx_command("tune batch_size --model mlp --dataset fashion-mnist "
                                    "--start_batch 8 --max_batch 16 --steps 1 --threads 2"),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "image 28x28")) << r.output;
  EXPECT_TRUE(has(r.output, "recommendation: --batch_size")) << r.output;
}

// A language model is tuned on windows of --seq_len random token ids over --vocab_size (the
// model's tokenizer's by default) with AdamW, in tokens/s; --no_bias tunes the GPT without its
// biases; a window longer than the model's context is refused in one line.
TEST(ModelDataFlagsTest, TuneStepsALanguageModelOnTokenWindows) {
  const std::string gpt =
      "tune batch_size --model gpt-nano --start_batch 2 --max_batch 4 --steps 1 --threads 2";
  auto r = run_command(ddpx_command(gpt + " --seq_len 32 --vocab_size 65 --no_bias"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "model gpt-nano tokens 32 vocabulary 65 (AdamW, no biases)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "tokens/s")) << r.output;
  EXPECT_TRUE(has(r.output, "recommendation: --batch_size")) << r.output;

  auto bert = run_command(ddpx_command("tune batch_size --model bert-nano --seq_len 16 "
                                       "--start_batch 2 --max_batch 2 --steps 1 --threads 2"),
                          300);
  ASSERT_EQ(bert.exit_code, 0) << bert.output;
  EXPECT_TRUE(has(bert.output, "model bert-nano tokens 16 vocabulary 30522 (AdamW)"))
      << bert.output;

  auto long_window = run_command(ddpx_command(gpt + " --seq_len 4096"), 60);
  EXPECT_NE(long_window.exit_code, 0) << long_window.output;
  EXPECT_TRUE(has(long_window.output, "longer than the model's context of 64 positions"))
      << long_window.output;
}

// The same model and data flags, typed after each verb, run and set the input the command uses;
// `--amp auto` decides the same after each verb (bf16 on this CPU if it has native bf16, else
// fp32), and each says what it chose and why.
TEST(ModelDataFlagsTest, TrainBenchAndTuneTakeTheSameModelAndDataFlags) {
  test::TempDir dir;
  const std::string flags =
      " --model mlp --stem imagenet --dataset synthetic --data_dir " + dir.path() +
      " --image_size 16 --synthetic_image 16 --synthetic_classes 4 --amp auto";
  const optim::AmpChoice amp =
      optim::resolve_amp(optim::Amp::kAuto, optim::cpu_bf16_support(optim::cpuinfo_flags()));
  // "amp bf16 (auto: this CPU has AVX512-BF16)", "amp off (auto: no native bf16 on this CPU; ...)"
  const std::string amp_line = fmt::format("amp {} ({})", optim::name(amp.amp), amp.reason);
  struct Case {
    std::string command, budget, expect;
  };
  const Case cases[] = {
      {"train", " --num_epochs 1 --synthetic_size 64 --batch_size 16 --threads 2 --no_progress",
       "3x16x16, 4 classes"},
      {"bench train", " --batch_size 8 --steps 2 --warmup 1 --threads 2", "16x16 input"},
      {"tune batch_size", " --start_batch 8 --max_batch 8 --steps 1 --threads 2", "image 16x16"},
  };
  for (const auto& c : cases) {
    auto r = run_command(ddpx_command(c.command + flags + c.budget), 300);
    EXPECT_EQ(r.exit_code, 0) << c.command << "\n" << r.output;
    EXPECT_TRUE(has(r.output, c.expect)) << c.command << "\n" << r.output;
    EXPECT_TRUE(has(r.output, amp_line)) << c.command << ": expected " << amp_line << "\n"
                                         << r.output;
  }
}

// An unknown dataset is refused by the parser the same way after every verb, naming the valid
// ones.
TEST(ModelDataFlagsTest, UnknownDatasetIsRefusedByEveryVerb) {
  for (const char* verb : {"train", "bench train", "tune batch_size"}) {
    auto r = run_command(ddpx_command(std::string(verb) + " --dataset imagenet22k"), 60);
    EXPECT_EQ(r.exit_code, 2) << verb << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "--dataset")) << verb << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "fashion-mnist")) << verb << "\n" << r.output;
  }
}

}  // namespace
}  // namespace ddpx
