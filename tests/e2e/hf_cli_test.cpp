// `ddpx export --format hf` and `ddpx train --pretrained DIR` as a user runs them: gpt-nano
// trained on real text (Debian's GPL as characters) is exported, transformers' real
// GPT2LMHeadModel.from_pretrained loads the folder with every key used, and a run started from
// the folder with a learning rate of 1e-30 (0 is refused) measures the val loss the first run ended
// with (the weights went out and came back unchanged). Logits are compared at the model level in
// tests/models/hf_gpt2_test.cpp. `ddpx generate --pretrained DIR` on a GPT-2 that transformers
// saved gives the tokens of transformers' own greedy generate and the text of tiktoken's decode.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A random GPT-2 of GPT-2's vocabulary (2 layers, 32 wide; initializer_range 0.2 so that the
// greedy choice is not a near tie that float rounding could flip), saved by save_pretrained;
// transformers' greedy generate and tiktoken's decode on the same rank file are the reference.
// GPT-2's tokenizer is saved beside the weights as vocab.json + merges.txt.
constexpr const char* kReferenceGeneration = R"(
import os, sys, torch, tiktoken, tiktoken.load
os.environ['HF_HUB_OFFLINE'] = '1'
from transformers import GPT2Config, GPT2LMHeadModel
out_dir, ranks, new = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
config = GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                    initializer_range=0.2)
model = GPT2LMHeadModel(config).eval()
model.save_pretrained(os.path.join(out_dir, 'hf'))
pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding(name='gpt2', pat_str=pat,
                        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(ranks),
                        special_tokens={'<|endoftext|>': 50256})
# The tokenizer beside the weights, as the Hub's GPT-2 folders hold it: vocab.json + merges.txt
# written by the tokenizers library, from the same rank file.
from transformers.convert_slow_tokenizer import TikTokenConverter
TikTokenConverter(vocab_file=ranks, pattern=pat).converted().model.save(os.path.join(out_dir, 'hf'))
prompt = open(os.path.join(out_dir, 'prompt.txt'), encoding='utf-8').read()
ids = enc.encode_ordinary(prompt)
model.generation_config.eos_token_id = None  # ddpx does not stop at <|endoftext|>
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=new, pad_token_id=0)[0].tolist()
assert len(out) == len(ids) + new, (len(out), len(ids))
open(os.path.join(out_dir, 'tokens.txt'), 'w').write(' '.join(map(str, out)) + '\n')
open(os.path.join(out_dir, 'text.txt'), 'wb').write(enc.decode_bytes(out) + b'\n')
)";

TEST(HfCliTest, GreedyGenerationFromTransformersWeightsEqualsTransformersGenerate) {
  ASSERT_TRUE(test::python_has_module("transformers"))
      << test::python_binary() << " lacks transformers: run scripts/python-env --tests";
  const std::string ranks = test::gpt2_rank_file();
  ASSERT_FALSE(ranks.empty());
  test::TempDir dir;
  const std::string prompt =
      "Caf\u00e9 \u2014 \"hello\", world!\n  def f(x): return x ** 2 \U0001F600";
  test::write_bytes(dir.file("prompt.txt"), prompt);
  const std::string new_tokens = "24";
  auto py = run_command(test::python_binary() + " -c " + test::shell_quote(kReferenceGeneration) +
                            " " + dir.path() + " " + test::shell_quote(ranks) + " " + new_tokens,
                        300);
  ASSERT_EQ(py.exit_code, 0) << py.output;

  const std::string generate = "generate --pretrained " + dir.file("hf") + " --prompt " +
                               test::shell_quote(prompt) + " --max_new_tokens " + new_tokens +
                               " --temperature 0 ";
  auto tokens =
      run_command(ddpx(generate + "--vocab " + test::shell_quote(ranks) + " --tokens"), 120);
  ASSERT_EQ(tokens.exit_code, 0) << tokens.output;
  EXPECT_EQ(tokens.output, read_text(dir.file("tokens.txt")));
  auto text = run_command(
      ddpx(generate + "--vocab " + test::shell_quote(ranks)) + " > " + dir.file("ddpx.txt"), 120);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(read_text(dir.file("ddpx.txt")), read_text(dir.file("text.txt")));
  // Without --vocab: the vocab.json and merges.txt beside the weights.
  auto beside = run_command(ddpx(generate) + " > " + dir.file("beside.txt"), 120);
  ASSERT_EQ(beside.exit_code, 0) << beside.output;
  EXPECT_EQ(read_text(dir.file("beside.txt")), read_text(dir.file("text.txt")));

  // The vocab.json of `ddpx data tokenize --tokenizer gpt2` names the rank file: the same text.
  auto tokenized = run_command(
      ddpx("data tokenize " + std::string(test::kTokenText) + " --tokenizer gpt2 --vocab " +
           test::shell_quote(ranks) + " --out " + dir.file("data")),
      120);
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  auto via_json = run_command(
      ddpx(generate + "--vocab " + dir.file("data/vocab.json")) + " > " + dir.file("json.txt"),
      120);
  ASSERT_EQ(via_json.exit_code, 0) << via_json.output;
  EXPECT_EQ(read_text(dir.file("json.txt")), read_text(dir.file("text.txt")));

  // A character vocabulary is too small for the model's tokens: one line naming the file.
  const std::string chars = dir.file("chars");
  auto char_data = run_command(
      ddpx("data tokenize " + std::string(test::kTokenText) + " --tokenizer char --out " + chars),
      120);
  ASSERT_EQ(char_data.exit_code, 0) << char_data.output;
  auto refused =
      run_command(ddpx("generate --pretrained " + dir.file("hf") +
                       " --prompt 'This License' --temperature 0 --vocab " + chars + "/vocab.json"),
                  120);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(test::has(refused.output, chars + "/vocab.json")) << refused.output;
}

}  // namespace
}  // namespace ddpx
