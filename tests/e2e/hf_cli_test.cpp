// `ddpx export --format hf` and `ddpx train --pretrained DIR` as a user runs them: gpt-nano
// trained on real text (Debian's GPL as characters) is exported, transformers' real
// GPT2LMHeadModel.from_pretrained loads the folder with every key used, and a run started from
// the folder with a learning rate of 1e-30 (0 is refused) measures the val loss the first run ended
// with (the weights went out and came back unchanged). Logits are compared at the model level in
// tests/models/hf_gpt2_test.cpp.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "e2e/token_fixture.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;

std::string last_val_loss(const std::string& output) {
  std::string found;
  std::regex re(R"(Loss on val dataset - ([0-9.]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it)
    found = (*it)[1];
  return found;
}

TEST(HfCliTest, ExportLoadsInTransformersAndComesBackAsPretrained) {
  ASSERT_TRUE(test::python_has_module("transformers"))
      << test::python_binary() << " lacks transformers: run scripts/python-env --tests";
  test::TempDir dir;
  test::write_char_tokens(dir.path());
  const std::string common = "--model gpt-nano --dataset tokens --data_dir " + dir.path() +
                             " --seq_len 32 --batch_size 8 --optimizer adamw "
                             "--limit_train_batches 4 --limit_test_batches 2 --eval_batch_size 64 "
                             "--threads 1 --seed 3 --no_progress --num_epochs 1 ";
  auto trained = run_command(
      ddpx("train " + common + "--learning_rate 1e-3 --save_dir " + dir.file("ck")), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string loss = last_val_loss(trained.output);
  ASSERT_FALSE(loss.empty()) << trained.output;

  auto exported =
      run_command(ddpx("export --checkpoint " + dir.file("ck/checkpoint_epoch0001.ddpx") +
                       " --format hf --out " + dir.file("hf")),
                  120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(test::has(exported.output, "GPT2LMHeadModel.from_pretrained")) << exported.output;

  auto loaded = test::run_python(
      "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\n"
      "from transformers import GPT2LMHeadModel\n"
      "m, info = GPT2LMHeadModel.from_pretrained('" +
      dir.file("hf") +
      "', output_loading_info=True)\n"
      "assert not any(info.values()), info\n"
      "c = m.config\n"
      "print('loaded', c.n_layer, c.n_head, c.n_embd, c.n_positions)\n");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_TRUE(test::has(loaded.output, "loaded 4 4 128 64")) << loaded.output;

  auto again = run_command(
      ddpx("train " + common + "--learning_rate 1e-30 --pretrained " + dir.file("hf")), 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(test::has(again.output, "loaded GPT-2 weights from " + dir.file("hf")))
      << again.output;
  EXPECT_EQ(last_val_loss(again.output), loss) << again.output;
}

}  // namespace
}  // namespace ddpx
