// `data tokenize` (text/tokenize.h): the files it writes hold what the reference scripts make of
// the same text (nanoGPT's shakespeare_char prepare.py for char; tiktoken with llm.c's
// <|endoftext|> before each document for gpt2), whatever the thread count, and bad input is
// refused before anything is overwritten.
#include "text/tokenize.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/token_file.h"
#include "support/support.h"
#include "text/char_tokenizer.h"

namespace ddpx::text {
namespace {

std::vector<int32_t> tokens_of(const std::string& path) {
  auto t = io::read_token_file(path);
  return {t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + t.numel()};
}

std::vector<int32_t> numpy_tokens(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<int32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::kInternal, "");
}

// nanoGPT's data/shakespeare_char/prepare.py on Debian's license texts: chars = sorted(set(data)),
// train = data[:int(n*0.9)], val = data[int(n*0.9):], ids by stoi.
TEST(TokenizeTest, CharMatchesNanoGptsPrepare) {
  test::TempDir dir;
  auto result = test::run_python(fmt::format(R"(
import glob, numpy as np
data = ''.join(open(p, encoding='utf-8').read() for p in sorted(glob.glob('/usr/share/common-licenses/*')))
data += 'Grüße 東京 🙂\n'
open('{0}/input.txt', 'w', encoding='utf-8', newline='').write(data)
chars = sorted(list(set(data)))
stoi = {{ch: i for i, ch in enumerate(chars)}}
n = len(data)
np.array([stoi[c] for c in data[:int(n*0.9)]], dtype=np.int32).tofile('{0}/train.ref')
np.array([stoi[c] for c in data[int(n*0.9):]], dtype=np.int32).tofile('{0}/val.ref')
open('{0}/chars.ref', 'w', encoding='utf-8').write(''.join(chars))
)",
                                             dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  TokenizeOptions options;
  options.inputs = {dir.file("input.txt")};
  options.tokenizer = TokenizerKind::kChar;
  options.out_dir = dir.file("out");
  options.threads = 3;
  options.chunk_bytes = 1000;  // many chunks, some cut inside multi-byte characters' reach
  auto r = tokenize_files(options);
  EXPECT_EQ(tokens_of(dir.file("out/train.bin")), numpy_tokens(dir.file("train.ref")));
  EXPECT_EQ(tokens_of(dir.file("out/val.bin")), numpy_tokens(dir.file("val.ref")));
  auto vocab = CharTokenizer::load(dir.file("out/vocab.json"));
  std::string chars = read_file(dir.file("chars.ref"));
  std::vector<uint32_t> all(vocab.vocab_size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  EXPECT_EQ(vocab.decode(all), chars);
  EXPECT_EQ(r.vocab_size, vocab.vocab_size());

  // The same vocabulary again with --vocab; a character it lacks is refused, naming it.
  test::write_bytes(dir.file("more.txt"), "Grüße\n");
  options.inputs = {dir.file("more.txt")};
  options.vocab = dir.file("out/vocab.json");
  options.out_dir = dir.file("more");
  tokenize_files(options);
  auto as_ids = [](const std::vector<int32_t>& t) {
    return std::vector<uint32_t>(t.begin(), t.end());
  };
  EXPECT_EQ(vocab.decode(as_ids(tokens_of(dir.file("more/train.bin")))) +
                vocab.decode(as_ids(tokens_of(dir.file("more/val.bin")))),
            "Grüße\n");
  test::write_bytes(dir.file("new.txt"), "Grüße ж\n");
  options.inputs = {dir.file("new.txt")};
  auto e = error_of([&] { tokenize_files(options); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_TRUE(test::has(e.what(),
                        "new.txt: the character U+0436 (\"ж\") at byte 8 is not in the "
                        "vocabulary"))
      << e.what();
}

// gpt2: every file is a document preceded by <|endoftext|>, as llm.c's prepare scripts do; one
// thread and many, with chunks of a few hundred bytes, write the same bytes.
TEST(TokenizeTest, Gpt2MatchesTiktokenWithEndOfTextBeforeEachDocument) {
  test::TempDir dir;
  auto result =
      test::run_python(fmt::format(R"(
import glob, numpy as np, tiktoken, tiktoken.load
pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{{L}}+| ?\p{{N}}+| ?[^\s\p{{L}}\p{{N}}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding(name="gpt2", pat_str=pat,
                        mergeable_ranks=tiktoken.load.load_tiktoken_bpe({1}),
                        special_tokens={{"<|endoftext|>": 50256}})
tokens = []
for i, p in enumerate(['/usr/share/common-licenses/GPL-3', '/usr/share/common-licenses/Apache-2.0']):
    text = open(p, encoding='utf-8', newline='').read() + 'Grüße 🙂\n'
    open('{0}/doc%d.txt' % i, 'w', encoding='utf-8', newline='').write(text)
    tokens += [enc.eot_token] + enc.encode_ordinary(text)
n = int(len(tokens) * 0.8)
np.array(tokens[:n], dtype=np.int32).tofile('{0}/train.ref')
np.array(tokens[n:], dtype=np.int32).tofile('{0}/val.ref')
)",
                                   dir.path(), test::shell_quote(test::gpt2_rank_file())));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  TokenizeOptions options;
  options.inputs = {dir.file("doc0.txt"), dir.file("doc1.txt")};
  options.vocab = test::gpt2_rank_file();
  options.val_fraction = 0.2;
  options.threads = 1;
  options.out_dir = dir.file("one");
  auto r = tokenize_files(options);
  EXPECT_EQ(r.vocab_size, 50257);
  EXPECT_EQ(tokens_of(dir.file("one/train.bin")), numpy_tokens(dir.file("train.ref")));
  EXPECT_EQ(tokens_of(dir.file("one/val.bin")), numpy_tokens(dir.file("val.ref")));
  options.threads = 4;
  options.chunk_bytes = 300;
  options.out_dir = dir.file("four");
  tokenize_files(options);
  EXPECT_EQ(read_file(dir.file("four/train.bin")), read_file(dir.file("one/train.bin")));
  EXPECT_EQ(read_file(dir.file("four/val.bin")), read_file(dir.file("one/val.bin")));
  std::string vocab = read_file(dir.file("one/vocab.json"));
  EXPECT_TRUE(test::has(vocab, "\"tokenizer\": \"gpt2\"")) << vocab;
  EXPECT_TRUE(test::has(vocab, "\"vocab_size\": 50257")) << vocab;
}

// Each refusal names the file and what to do, and leaves the previous output as it was.
TEST(TokenizeTest, BadInputOverwritesNothing) {
  test::TempDir dir;
  test::write_bytes(dir.file("good.txt"), "To be, or not to be, that is the question.\n");
  test::write_bytes(dir.file("latin1.txt"), "caf\xe9 cr\xe8me\n");
  TokenizeOptions options;
  options.inputs = {dir.file("good.txt")};
  options.tokenizer = TokenizerKind::kChar;
  options.out_dir = dir.file("out");
  tokenize_files(options);
  const std::string train = read_file(dir.file("out/train.bin"));
  const std::string val = read_file(dir.file("out/val.bin"));
  const std::string vocab = read_file(dir.file("out/vocab.json"));

  auto refused = [&](TokenizeOptions o, const std::string& needle) {
    auto e = error_of([&] { tokenize_files(o); });
    EXPECT_TRUE(test::has(e.what(), needle)) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_EQ(read_file(dir.file("out/train.bin")), train);
    EXPECT_EQ(read_file(dir.file("out/val.bin")), val);
    EXPECT_EQ(read_file(dir.file("out/vocab.json")), vocab);
  };
  TokenizeOptions o = options;
  o.inputs = {dir.file("good.txt"), dir.file("missing.txt")};
  refused(o, "missing.txt: no such text file");
  o = options;
  o.inputs = {dir.file("latin1.txt")};
  refused(o, "latin1.txt: byte 3 is not valid UTF-8");
  o.tokenizer = TokenizerKind::kGpt2;
  o.vocab = test::gpt2_rank_file();
  refused(o, "latin1.txt: byte 3 is not valid UTF-8; convert the file to UTF-8");
  o.vocab = dir.file("no.tiktoken");
  refused(o, "no.tiktoken: no such rank file; get GPT-2's with `ddpx data download gpt2-vocab`");
  o.vocab = dir.file("good.txt");
  refused(o, "good.txt: line 1: the rank is not a number");
  o = options;
  o.vocab = dir.file("absent.json");
  refused(o, "absent.json: no such vocabulary file");
  o.vocab = dir.file("good.txt");
  refused(o, "good.txt: not JSON");
  o = options;
  o.val_fraction = 1;
  refused(o, "--val_fraction 1 is outside [0, 1)");

  // With --allow_invalid_utf8 the Latin-1 bytes are byte tokens, and decode gives them back.
  o = options;
  o.inputs = {dir.file("latin1.txt")};
  o.tokenizer = TokenizerKind::kGpt2;
  o.vocab = test::gpt2_rank_file();
  o.allow_invalid_utf8 = true;
  o.val_fraction = 0;
  o.out_dir = dir.file("bytes");
  tokenize_files(o);
  auto tokens = tokens_of(dir.file("bytes/train.bin"));
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens.front(), 50256);
  EXPECT_EQ(tokens_of(dir.file("bytes/val.bin")).size(), 0u);
}

}  // namespace
}  // namespace ddpx::text
