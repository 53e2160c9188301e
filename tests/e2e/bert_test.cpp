// `ddpx train --model bert-nano --dataset tokens` with masked-LM as a user runs it: Debian's GPL
// tokenized by `ddpx data tokenize --tokenizer wordpiece` over a vocab.txt made from the same
// text (the specials, its 400 most frequent words, and every character alone and as a "##"
// continuation, so any word can be spelled); the lines it prints, two DDP ranks training like
// one process on the same global batch, data without [MASK] refused before training, and the
// trained model exported with `ddpx export --format hf`, loaded by transformers'
// BertForMaskedLM with every key used, and back with `--pretrained` measuring the same val loss.
// Split over two tensor-parallel ranks (heads, MLP and the vocabulary, padded to a multiple of
// 128 x 2 and said so), with and without --sequence_parallel: every epoch's masked-LM loss and
// val loss, and the final weights exported from the checkpoint (BertForMaskedLM's keys, the
// unpadded vocabulary), held to one process on the same global batch; and a pipeline of two
// tensor-parallel stages on 4 ranks, whose checkpoint resumes in one process. Tolerance: 1e-4 on
// the printed losses (as two DDP ranks'), 2e-4 absolute on every weight after 10 AdamW steps at lr
// 1e-3 (float32 sums in another order, which AdamW's normalised steps carry to about lr where a
// gradient is rounding noise; a mis-cut piece differs by the weights' own size, 2e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::numbers_after;
using test::run_command;

constexpr const char* kBertText = "/usr/share/common-licenses/GPL-3";

std::string make_vocab_txt(const std::string& text) {
  std::map<std::string, int> counts;
  std::set<char> chars;
  std::string word;
  for (char c : text + " ") {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      word.push_back(static_cast<char>(std::tolower(u)));
    } else {
      if (!word.empty()) ++counts[word];
      word.clear();
    }
    if (std::isgraph(u)) chars.insert(static_cast<char>(std::tolower(u)));
  }
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [w, n] : counts)
    if (w.size() > 1) top.emplace_back(-n, w);
  std::sort(top.begin(), top.end());
  top.resize(std::min<size_t>(top.size(), 400));
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (char c : chars) vocab += std::string(1, c) + "\n##" + std::string(1, c) + "\n";
  for (const auto& [n, w] : top) vocab += w + "\n";
  return vocab;
}

class BertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_bytes(dir_.file("vocab.txt"), make_vocab_txt(read_file(kBertText)));
    auto r = run_command(
        ddpx(std::string("data tokenize ") + kBertText + " --tokenizer wordpiece --vocab " +
             dir_.file("vocab.txt") + " --out " + dir_.file("data")),
        120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // bert-nano on 64-token windows: 5 steps of 8 windows, AdamW.
  std::string train(const std::string& extra) const {
    return "train --model bert-nano --dataset tokens --data_dir " + dir_.file("data") +
           " --seq_len 64 --batch_size 8 --optimizer adamw --learning_rate 1e-3 "
           "--weight_decay 0.01 --limit_train_batches 5 --limit_test_batches 2 "
           "--eval_batch_size 32 --threads 1 --seed 3 --no_progress " +
           extra;
  }
  test::TempDir dir_;
};

TEST_F(BertTest, OneProcessPrintsMaskedLmLossAndLearns) {
  auto r = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "Sequence length: 64, Vocabulary: ")) << r.output;
  const auto loss = numbers_after(r.output, "mlm_loss_train");
  const auto val = numbers_after(r.output, "Loss on val dataset");
  ASSERT_EQ(loss.size(), 2u) << r.output;
  ASSERT_EQ(val.size(), 2u) << r.output;
  // At first the masked tokens are guessed among the whole vocabulary: log(V) or so.
  EXPECT_GT(loss[0], 3.0);
  EXPECT_LT(loss[1], loss[0]) << "the second epoch's loss must be lower";
  EXPECT_LT(val[1], val[0]);
}

TEST_F(BertTest, TwoDdpRanksTrainLikeOneProcessOnTheSameGlobalBatch) {
  auto one = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                              train("--num_epochs 2 --batch_size_scaled")),
                         300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto a = numbers_after(one.output, "mlm_loss_train"),
             b = numbers_after(two.output, "mlm_loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(two.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(b.size(), 2u) << two.output;
  ASSERT_EQ(va.size(), 2u) << one.output;
  ASSERT_EQ(vb.size(), 2u) << two.output;
  // The same windows and masks on either layout; float sums in another order: 1e-4.
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(va[i], vb[i], 1e-4) << "epoch " << i;
  }
}

TEST_F(BertTest, TensorParallelTwoRanksWithAndWithoutSequenceParallelTrainLikeOneProcess) {
  ASSERT_TRUE(test::python_has_module("transformers"));
  auto one = run_command(ddpx(train("--num_epochs 2 --save_dir " + dir_.file("one"))), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto want = numbers_after(one.output, "mlm_loss_train");
  const auto want_val = numbers_after(one.output, "Loss on val dataset");
  ASSERT_EQ(want.size(), 2u) << one.output;
  ASSERT_EQ(want_val.size(), 2u) << one.output;
  const std::vector<std::pair<std::string, std::string>> layouts{
      {"tp2", "--tensor_parallel 2"}, {"tp2sp", "--tensor_parallel 2 --sequence_parallel"}};
  for (const auto& [name, flags] : layouts) {
    auto split =
        run_command(ddpx("run 2 --log_dir " + dir_.file("log_" + name) + " -- " +
                         train("--num_epochs 2 --save_dir " + dir_.file(name) + " " + flags)),
                    300);
    ASSERT_EQ(split.exit_code, 0) << split.output;
    EXPECT_TRUE(test::has(split.output,
                          "tensor parallel: 2 ranks a layer x 1 data-parallel replica (4 layers: "
                          "4 heads -> 2 a rank, intermediate width 512 -> 256; vocabulary "))
        << split.output;
    EXPECT_TRUE(test::has(split.output,
                          "(a multiple of --vocab_divisible_by 128 x 2; the padding "
                          "never predicted), the masked-LM loss from each rank's "
                          "logits"))
        << split.output;
    if (name == "tp2sp")
      EXPECT_TRUE(test::has(split.output, "sequence parallel: LayerNorms")) << split.output;
    const auto got = numbers_after(split.output, "mlm_loss_train");
    const auto got_val = numbers_after(split.output, "Loss on val dataset");
    ASSERT_EQ(got.size(), 2u) << split.output;
    ASSERT_EQ(got_val.size(), 2u) << split.output;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4) << name << " epoch " << i;
      EXPECT_NEAR(got_val[i], want_val[i], 1e-4) << name << " epoch " << i;
    }
  }
  for (const std::string run : {"one", "tp2", "tp2sp"}) {
    auto exported =
        run_command(ddpx("export --checkpoint " + dir_.file(run) +
                         "/checkpoint_epoch0002.ddpx --format hf --out " + dir_.file(run + "_hf")),
                    120);
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
  }
  auto compared = test::run_python(
      "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\n"
      "from transformers import BertForMaskedLM\n"
      "def load(run):\n"
      "  m, info = BertForMaskedLM.from_pretrained('" +
      dir_.path() +
      "/' + run + '_hf', output_loading_info=True)\n"
      "  assert not any(info.values()), (run, info)\n"
      "  return m.config.vocab_size, m.state_dict()\n"
      "vocab, want = load('one')\n"
      "for run in ['tp2', 'tp2sp']:\n"
      "  v, got = load(run)\n"
      "  assert v == vocab and got.keys() == want.keys(), run\n"
      "  d = max((got[k] - want[k]).abs().max().item() for k in want)\n"
      "  print(run, 'vocabulary', v, 'keys', len(got), 'largest difference', d)\n"
      "  assert d < 2e-4, (run, d)\n");
  EXPECT_EQ(compared.exit_code, 0) << compared.output;
}

// `ddpx run 4` on the 3-D mesh: bert-nano's embeddings on the first stage, its layers cut into 2
// stages, the MLM head with the tied decoder on the last, each stage split over 2 tensor ranks.
// Every epoch's masked-LM loss and val loss held to one process's (1e-4), and its checkpoint after
// epoch 1 resumed by one process: epoch 2's loss is the single process's.
TEST_F(BertTest, PipelineOfTensorParallelStagesTrainsLikeOneProcessAndResumesInOne) {
  auto one = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto want = numbers_after(one.output, "mlm_loss_train");
  const auto want_val = numbers_after(one.output, "Loss on val dataset");
  ASSERT_EQ(want.size(), 2u) << one.output;
  ASSERT_EQ(want_val.size(), 2u) << one.output;
  auto mesh = run_command(
      ddpx("run 4 --log_dir " + dir_.file("log_pp2tp2") + " -- " +
           train("--num_epochs 2 --pipeline_parallel 2 --tensor_parallel 2 --save_dir " +
                 dir_.file("pp2tp2"))),
      300);
  ASSERT_EQ(mesh.exit_code, 0) << mesh.output;
  EXPECT_TRUE(test::has(mesh.output,
                        "mesh (data x pipeline x tensor) 1 x 2 x 2: replica 0: stage 0 ranks 0 1, "
                        "stage 1 ranks 2 3"))
      << mesh.output;
  const auto got = numbers_after(mesh.output, "mlm_loss_train");
  const auto got_val = numbers_after(mesh.output, "Loss on val dataset");
  ASSERT_EQ(got.size(), 2u) << mesh.output;
  ASSERT_EQ(got_val.size(), 2u) << mesh.output;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(got_val[i], want_val[i], 1e-4) << "epoch " << i;
  }
  auto resumed = run_command(
      ddpx(train("--num_epochs 2 --resume " + dir_.file("pp2tp2") + "/checkpoint_epoch0001.ddpx")),
      300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto after = numbers_after(resumed.output, "mlm_loss_train");
  ASSERT_EQ(after.size(), 1u) << resumed.output;
  EXPECT_NEAR(after[0], want[1], 1e-4) << "the resumed epoch 2";
}

TEST_F(BertTest, ExportLoadsInTransformersAndComesBackAsPretrained) {
  ASSERT_TRUE(test::python_has_module("transformers"));
  auto trained = run_command(ddpx(train("--num_epochs 1 --save_dir " + dir_.file("ck"))), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto val = numbers_after(trained.output, "Loss on val dataset");
  ASSERT_EQ(val.size(), 1u) << trained.output;
  auto exported =
      run_command(ddpx("export --checkpoint " + dir_.file("ck/checkpoint_epoch0001.ddpx") +
                       " --format hf --out " + dir_.file("hf")),
                  120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(test::has(exported.output, "BertForMaskedLM.from_pretrained")) << exported.output;
  auto loaded = test::run_python(
      "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\n"
      "from transformers import BertForMaskedLM\n"
      "m, info = BertForMaskedLM.from_pretrained('" +
      dir_.file("hf") +
      "', output_loading_info=True)\n"
      "assert not any(info.values()), info\n"
      "c = m.config\n"
      "print('loaded', c.num_hidden_layers, c.num_attention_heads, c.hidden_size)\n");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_TRUE(test::has(loaded.output, "loaded 4 4 128")) << loaded.output;
  // A rate of 1e-30 (0 is refused): the evaluation sees the exported weights.
  auto again = run_command(
      ddpx(train("--num_epochs 1 --learning_rate 1e-30 --pretrained " + dir_.file("hf"))), 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(test::has(again.output, "loaded BERT weights from " + dir_.file("hf")))
      << again.output;
  const auto val_again = numbers_after(again.output, "Loss on val dataset");
  ASSERT_EQ(val_again.size(), 1u) << again.output;
  EXPECT_EQ(val_again[0], val[0]);
}

TEST_F(BertTest, TokensWithoutMaskAreRefusedBeforeTraining) {
  auto tok = run_command(ddpx(std::string("data tokenize ") + kBertText +
                              " --tokenizer char --out " + dir_.file("chars")),
                         120);
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  auto r = run_command(ddpx("train --model bert-nano --dataset tokens --data_dir " +
                            dir_.file("chars") + " --seq_len 64 --num_epochs 1 --no_progress"),
                       120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(test::has(r.output, dir_.file("chars") + "/vocab.json: the tokens are not "
                                                       "WordPiece's (tokenizer char)"))
      << r.output;
  EXPECT_TRUE(test::has(r.output, "--tokenizer wordpiece --vocab vocab.txt")) << r.output;
}

}  // namespace
}  // namespace ddpx
