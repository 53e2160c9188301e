// BERT's masking (data/masked_lm.h) on token windows cut from a real token file: exactly
// round(0.15 * seq_len) non-special positions per window, 80/10/10 [MASK]/random/kept, labels
// only there, the same draw for the same (seed, epoch, window) in any batch and another for
// another window; and vocab.json without [MASK] refused naming the file.
#include "data/masked_lm.h"

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/token_source.h"
#include "data/token_windows.h"
#include "io/token_file.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

constexpr int64_t kMask = 4, kCls = 2, kSep = 3, kVocab = 1000;

// Tokens from Debian's GPL: its bytes shifted past the five specials, a [CLS] ... [SEP] per
// paragraph.
void write_tokens(const test::TempDir& dir) {
  std::string text = read_file("/usr/share/common-licenses/GPL-3");
  std::vector<uint32_t> tokens{kCls};
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "\n\n") == 0) tokens.insert(tokens.end(), {kSep, kCls});
    tokens.push_back(5 + static_cast<unsigned char>(text[i]));
  }
  tokens.push_back(kSep);
  io::write_token_file(dir.file("train.bin"), tokens);
  io::write_token_file(dir.file("val.bin"),
                       std::vector<uint32_t>(tokens.begin(), tokens.begin() + 4000));
  test::write_bytes(dir.file("vocab.json"),
                    R"({"tokenizer": "wordpiece", "vocab_size": 1000, "special_tokens": )"
                    R"({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}})");
}

TEST(MaskedLmTest, ChoosesFifteenPercentOfOrdinaryTokensEightyTenTen) {
  test::TempDir dir;
  write_tokens(dir);
  auto splits = load_token_dataset(dir.path(), 64, 0, "bert-nano", 7);
  ASSERT_NE(splits.train.masked_lm, nullptr);
  EXPECT_EQ(splits.train.num_classes, kVocab);  // the vocab.json's, not the largest token + 1
  TokenSource source(splits.train, /*window_seed=*/7);
  const int64_t n = splits.train.size();
  std::vector<int64_t> indices(n);
  for (int64_t i = 0; i < n; ++i) indices[i] = i;
  Batch batch = source.gather(indices.data(), n, /*epoch=*/1, 0);
  Batch plain =
      window_batch(splits.train, indices.data(), n, window_offset(7, 1, splits.train.seq_len));
  ASSERT_EQ(batch.images.sizes(), plain.images.sizes());
  const int64_t k = masked_per_window(64);
  EXPECT_EQ(k, 10);
  int64_t masked = 0, replaced = 0, kept = 0;
  auto x = batch.images.accessor<int64_t, 2>();
  auto y = batch.labels.accessor<int64_t, 2>();
  auto orig = plain.images.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t chosen = 0;
    for (int64_t p = 0; p < 64; ++p) {
      if (y[i][p] == kIgnoreLabel) {
        EXPECT_EQ(x[i][p], orig[i][p]);
        continue;
      }
      ++chosen;
      EXPECT_EQ(y[i][p], orig[i][p]);
      EXPECT_GE(orig[i][p], 5) << "a special token was chosen";
      if (x[i][p] == kMask)
        ++masked;
      else if (x[i][p] == orig[i][p])
        ++kept;
      else
        ++replaced;
    }
    EXPECT_EQ(chosen, k) << "window " << i;
  }
  const double total = static_cast<double>(masked + replaced + kept);
  EXPECT_NEAR(masked / total, 0.8, 0.03);
  EXPECT_NEAR(replaced / total, 0.1, 0.03);  // a random token may be the original: kept
  EXPECT_NEAR(kept / total, 0.1, 0.03);

  // Window 5 alone, or in another batch, draws what it drew beside the others.
  int64_t five = 5;
  Batch alone = source.gather(&five, 1, 1, 3);
  EXPECT_TRUE(alone.images[0].equal(batch.images[5]));
  EXPECT_TRUE(alone.labels[0].equal(batch.labels[5]));
  // Another epoch draws again.
  Batch later = source.gather(&five, 1, 2, 0);
  EXPECT_FALSE(later.labels[0].equal(batch.labels[5]) && later.images[0].equal(batch.images[5]));
}

TEST(MaskedLmTest, VocabularyWithoutMaskIsRefused) {
  test::TempDir dir;
  write_tokens(dir);
  test::write_bytes(
      dir.file("vocab.json"),
      R"({"tokenizer": "wordpiece", "vocab_size": 1000, "special_tokens": {"[CLS]": 2}})");
  try {
    load_token_dataset(dir.path(), 64, 0, "bert-nano", 7);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(
        e.what(), dir.file("vocab.json") + ": the vocab.txt it was tokenized with has no [MASK]"))
        << e.what();
    EXPECT_TRUE(test::has(e.what(), "--tokenizer wordpiece")) << e.what();
  }
  test::write_bytes(dir.file("vocab.json"), R"({"tokenizer": "char", "chars": ["a"]})");
  EXPECT_THROW(load_token_dataset(dir.path(), 64, 0, "bert-nano", 7), Error);
}

}  // namespace
}  // namespace ddpx::data
