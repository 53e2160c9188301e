// `ddpx train --model gpt-nano --dataset tokens` as a user runs it, on real text (Debian's copy
// of the GPL, its characters as tokens): the lines a language model prints, two DDP ranks and two
// ZeRO-3 ranks training like one process on the same global batch, a resumed run ending where
// an uninterrupted one does, and `ddpx generate` from the checkpoint, with and without its
// key/value cache.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "e2e/token_fixture.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;

std::vector<double> numbers_after(const std::string& text, const std::string& label) {
  std::vector<double> out;
  std::regex re(label + R"( - ([0-9.]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

class LanguageModelTest : public ::testing::Test {
 protected:
  void SetUp() override { test::write_char_tokens(dir_.path()); }
  // gpt-nano on 32-token windows: 6 steps of 8 windows, AdamW.
  std::string train(const std::string& extra, int seq_len = 32) const {
    return "train --model gpt-nano --dataset tokens --data_dir " + dir_.path() + " --seq_len " +
           std::to_string(seq_len) +
           " --batch_size 8 --optimizer adamw --learning_rate 1e-3 "
           "--weight_decay 0.1 --limit_train_batches 6 --limit_test_batches 2 "
           "--eval_batch_size 64 --threads 1 --seed 3 --no_progress " +
           extra;
  }
  test::TempDir dir_;
};

TEST_F(LanguageModelTest, OneProcessPrintsTokenLossPerplexityAndLearns) {
  auto r = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "Sequence length: 32, Vocabulary: ")) << r.output;
  EXPECT_TRUE(test::has(r.output, "tokens_per_sec - ")) << r.output;
  const auto loss = numbers_after(r.output, "loss_train");
  const auto perplexity = numbers_after(r.output, "perplexity_train");
  const auto val = numbers_after(r.output, "Loss on val dataset");
  ASSERT_EQ(loss.size(), 2u) << r.output;
  ASSERT_EQ(perplexity.size(), 2u) << r.output;
  ASSERT_EQ(val.size(), 2u) << r.output;
  EXPECT_NEAR(perplexity[1], std::exp(loss[1]), 1e-2 * perplexity[1]);
  EXPECT_LT(loss[1], loss[0]) << "the second epoch's loss must be lower";
  EXPECT_LT(val[1], val[0]);
}

TEST_F(LanguageModelTest, TwoDdpRanksTrainLikeOneProcessOnTheSameGlobalBatch) {
  auto one = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                              train("--num_epochs 2 --batch_size_scaled")),
                         300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto a = numbers_after(one.output, "loss_train"),
             b = numbers_after(two.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(two.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(b.size(), 2u) << two.output;
  ASSERT_EQ(vb.size(), 2u) << two.output;
  // Float sums in another order: the same losses to 1e-4.
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(va[i], vb[i], 1e-4) << "epoch " << i;
  }
}

TEST_F(LanguageModelTest, ZeroThreeOnTwoRanksTrainsLikeOneProcess) {
  auto one = run_command(ddpx(train("--num_epochs 1 --clip_grad_norm 1")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto zero3 = run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                                train("--num_epochs 1 --clip_grad_norm 1 --batch_size_scaled "
                                      "--shard full")),
                           300);
  ASSERT_EQ(zero3.exit_code, 0) << zero3.output;
  EXPECT_TRUE(test::has(zero3.output, "ZeRO-3")) << zero3.output;
  const auto a = numbers_after(one.output, "loss_train");
  const auto b = numbers_after(zero3.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(zero3.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 1u) << one.output;
  ASSERT_EQ(b.size(), 1u) << zero3.output;
  ASSERT_EQ(vb.size(), 1u) << zero3.output;
  EXPECT_NEAR(a[0], b[0], 1e-4);
  EXPECT_NEAR(va[0], vb[0], 1e-4);
}

// A constant rate, so that the one-epoch run's schedule is the three-epoch run's first epoch.
TEST_F(LanguageModelTest, AResumedRunEndsWhereAnUninterruptedOneDoes) {
  const std::string constant = "--lr_schedule constant --save_dir ";
  auto whole = run_command(ddpx(train("--num_epochs 3 " + constant + dir_.file("a"))), 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  auto first = run_command(ddpx(train("--num_epochs 1 " + constant + dir_.file("b"))), 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest =
      run_command(ddpx(train("--num_epochs 3 --resume auto " + constant + dir_.file("b"))), 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto a = numbers_after(whole.output, "loss_train");
  const auto b = numbers_after(rest.output, "loss_train");
  const auto va = numbers_after(whole.output, "Loss on val dataset");
  const auto vb = numbers_after(rest.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 3u) << whole.output;
  ASSERT_EQ(b.size(), 2u) << rest.output;
  ASSERT_EQ(vb.size(), 2u) << rest.output;
  // Bit for bit: the same windows, the same order, the same arithmetic.
  EXPECT_EQ(a[1], b[0]);
  EXPECT_EQ(a[2], b[1]);
  EXPECT_EQ(va[2], vb[1]);
}

TEST_F(LanguageModelTest, ASeqLenPastTheModelsContextIsRefusedNamingTheFlag) {
  auto r = run_command(ddpx(train("--num_epochs 1", /*seq_len=*/65)), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "--seq_len 64")) << r.output;
}

TEST_F(LanguageModelTest, MissingTokenFilesAreNamedWithTheCommandThatWritesThem) {
  auto r = run_command(ddpx("train --model gpt-nano --dataset tokens --data_dir " +
                            dir_.file("none") + " --num_epochs 1"),
                       120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, dir_.file("none") + "/train.bin")) << r.output;
  EXPECT_TRUE(test::has(r.output, "ddpx data tokenize")) << r.output;
}

}  // namespace
}  // namespace ddpx
