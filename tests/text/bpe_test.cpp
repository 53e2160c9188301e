// GPT-2's tokenizer (text/bpe.h) against the `tiktoken` package built offline from the same rank
// file (GPT-2's pattern, <|endoftext|> = 50256), token for token, on real text: Debian's license
// texts, Python sources from the test environment, and literal Unicode, emoji and whitespace.
#include "text/bpe.h"

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"
#include "text/gpt2_pattern.h"

namespace ddpx::text {
namespace {

// The reference Encoding; `pat` is GPT-2's pattern as tiktoken's gpt2() gave it.
constexpr const char* kReference = R"(
import glob, os, sys, numpy as np, tiktoken, tiktoken.load
pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding(name="gpt2", pat_str=pat,
                        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(RANKS),
                        special_tokens={"<|endoftext|>": 50256})
def save(name, data, tokens):
    open(os.path.join(OUT, name + '.txt'), 'wb').write(data)
    np.array(tokens, dtype=np.uint32).tofile(os.path.join(OUT, name + '.tok'))
)";

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tokenizer = BpeTokenizer::from_file(test::gpt2_rank_file());
  return tokenizer;
}

std::string reference_script(const test::TempDir& dir, const std::string& body) {
  return fmt::format("RANKS = {}\nOUT = {}\n", test::shell_quote(test::gpt2_rank_file()),
                     test::shell_quote(dir.path())) +
         kReference + body;
}

std::vector<uint32_t> read_tokens(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<uint32_t> tokens(bytes.size() / 4);
  std::memcpy(tokens.data(), bytes.data(), bytes.size());
  return tokens;
}

// Compares ddpx's tokens of DIR/NAME.txt with tiktoken's in DIR/NAME.tok, naming the first
// difference.
void expect_same_tokens(const test::TempDir& dir, const std::string& name) {
  std::string text = read_file(dir.file(name + ".txt"));
  auto expected = read_tokens(dir.file(name + ".tok"));
  auto got = gpt2().encode(text);
  ASSERT_EQ(got.size(), expected.size()) << name;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], expected[i]) << name << ": token " << i << " of " << got.size();
  EXPECT_EQ(gpt2().decode(got), text) << name;
}

TEST(BpeTest, VocabularyIsGpt2s) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().end_of_text(), 50256u);
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<uint32_t>{15496, 995}));
  EXPECT_EQ(gpt2().decode({50256}), "<|endoftext|>");
}

TEST(BpeTest, MatchesTiktokenOnRealText) {
  test::TempDir dir;
  auto result = test::run_python(reference_script(dir, R"(
import tiktoken_ext.openai_public as public
r50k = tiktoken.Encoding(name="r50k", pat_str=public.r50k_pat_str,
                         mergeable_ranks=enc._mergeable_ranks, special_tokens={})
def both(name, text):
    tokens = enc.encode_ordinary(text)
    assert tokens == r50k.encode_ordinary(text), name  # tiktoken's faster form of the pattern
    save(name, text.encode('utf-8'), tokens)
licenses = sorted(glob.glob('/usr/share/common-licenses/*'))
assert len(licenses) >= 5, licenses
both('licenses', ''.join(open(p, encoding='utf-8', newline='').read() for p in licenses))
sources = sorted(glob.glob(os.path.join(os.path.dirname(tiktoken.__file__), '*.py')))
sources += sorted(glob.glob(os.path.join(os.path.dirname(np.__file__), 'lib', '*.py')))[:20]
both('code', ''.join(open(p, encoding='utf-8', newline='').read() for p in sources))
both('unicode', 'Grüße aus Köln, café crème, naïve façade; Ελληνικά; Русский текст; '
     '東京都の天気は晴れです。北京欢迎你！서울특별시 ٣٤٥ ⅫⅣ ½ ¾ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢\n' * 3)
both('emoji', 'ok 🙂👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️‍🔥 🏳️‍🌈 keycap 1️⃣ done!!! 🤖🤖🤖\n')
both('whitespace', 'a  b   c\t\td \n\n\n  e\r\n\r\n f\u00a0g\u3000h\u2028i \u180e j\x0b\x0ck\x1c\x1dl'
     '      \n   x        ' + ' ' * 40 + '\n\n\t \t')
both('contractions', "I'll they're we've she's don't I'M it'd THEY'RE 'tis ''s o'clock")
both('numbers', 'Pi is 3.14159265358979, 1,000,000 + 2e10 = 0x1F; 12345678901234567890')
both('endoftext', 'text <|endoftext|> is ordinary text here')
print(len(licenses), len(sources))
)"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* name : {"licenses", "code", "unicode", "emoji", "whitespace", "contractions",
                           "numbers", "endoftext"})
    expect_same_tokens(dir, name);
}

// Hugging Face's vocab.json + merges.txt, as the tokenizers library saves GPT-2's BPE (made here
// from the same rank file by transformers' TikTokenConverter), and the tokenizer.json of
// transformers' save_pretrained, read as that rank file's tokenizer: the same 50,257 tokens, and
// on real text the tokens transformers' GPT2TokenizerFast gives from those files. The Hub's
// folders also list <|endoftext|> in vocab.json.
TEST(BpeTest, HuggingFacesVocabAndMergesGiveTransformersTokens) {
  test::TempDir dir;
  auto result = test::run_python(reference_script(dir, R"(
import json
from transformers import GPT2TokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter
tok = TikTokenConverter(vocab_file=RANKS, pattern=pat,
                        extra_special_tokens=['<|endoftext|>']).converted()
for sub in ('plain', 'hub'):
    os.makedirs(os.path.join(OUT, sub))
    tok.model.save(os.path.join(OUT, sub))
# transformers 5's save_pretrained writes tokenizer.json alone.
GPT2TokenizerFast(tokenizer_object=tok).save_pretrained(os.path.join(OUT, 'json'))
assert not os.path.exists(os.path.join(OUT, 'json', 'vocab.json'))
hub = os.path.join(OUT, 'hub', 'vocab.json')
vocab = json.load(open(hub, encoding='utf-8'))
vocab['<|endoftext|>'] = 50256
json.dump(vocab, open(hub, 'w', encoding='utf-8'), ensure_ascii=False)
hf = GPT2TokenizerFast.from_pretrained(os.path.join(OUT, 'hub'))  # reads the two files
licenses = sorted(glob.glob('/usr/share/common-licenses/*'))[:4]
text = ''.join(open(p, encoding='utf-8', newline='').read() for p in licenses)
text += 'Grüße 東京 🙂👍🏽 a  b\t\n\n x'
tokens = hf(text)['input_ids']
assert tokens == enc.encode_ordinary(text)
save('hf', text.encode('utf-8'), tokens)
)"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string text = read_file(dir.file("hf.txt"));
  const auto expected = read_tokens(dir.file("hf.tok"));
  for (const std::string& path :
       {dir.file("plain"), dir.file("plain/vocab.json"), dir.file("hub"),
        dir.file("hub/vocab.json"), dir.file("json"), dir.file("json/tokenizer.json")}) {
    BpeTokenizer hf = BpeTokenizer::from_file(path);
    EXPECT_EQ(hf.vocab_size(), 50257) << path;
    EXPECT_EQ(hf.end_of_text(), 50256u) << path;
    EXPECT_EQ(hf.encode(text), expected) << path;
  }
  // A vocab.json whose ids are not its merge order (merges.txt's first two swapped) is refused.
  std::string vocab = read_file(dir.file("plain/vocab.json"));
  const std::string first_two = "\"\u0120t\":256,\"\u0120a\":257";  // Ġt and Ġa
  const size_t at = vocab.find(first_two);
  ASSERT_NE(at, std::string::npos);
  write_file_atomic(dir.file("plain/vocab.json"),
                    vocab.replace(at, first_two.size(), "\"\u0120t\":257,\"\u0120a\":256"));
  try {
    BpeTokenizer::from_file(dir.file("plain"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_TRUE(test::has(e.what(),
                          "merges.txt line 3 makes \"\u0120a\" (id 256) after a merge "
                          "made id 257; ddpx reads the byte-level BPE vocabularies whose "
                          "ids are their merge order"))
        << e.what();
  }
}

// Bytes that are not UTF-8: each run of them is one piece, byte-pair merged (tiktoken's
// _encode_single_piece), and the valid text between runs is tokenized as texts of their own
// (encode_ordinary); decode gives the bytes back.
TEST(BpeTest, InvalidUtf8BytesAreTokens) {
  test::TempDir dir;
  auto result = test::run_python(reference_script(dir, R"(
import re
data = (b'caf\xe9 cr\xe8me ' + 'Grüße'.encode() + b'\xff\xfe\x00 abc\x80\x80 \xe2\x82 x'
        + b' \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big \xc0\xaf overlong' + b'\n\xf0\x9f\x99')
text = data.decode('utf-8', 'surrogateescape')
tokens = []
for run in re.split('([\udc80-\udcff]+)', text):
    if not run:
        continue
    if '\udc80' <= run[0] <= '\udcff':
        tokens += enc._encode_single_piece(run.encode('utf-8', 'surrogateescape'))
    else:
        tokens += enc.encode_ordinary(run)
save('invalid', data, tokens)
)"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  expect_same_tokens(dir, "invalid");
}

// Cutting a text at GPT-2's split points and tokenizing the chunks apart gives the tokens of the
// whole (the lookahead sees past each cut).
TEST(BpeTest, ChunksAtSplitPointsGiveTheWholeTextsTokens) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += fmt::format("Line {} of text  \n\n  \nWord{}\n\t\n'll go {}\n", i, i, i * 7);
  auto whole = gpt2().encode(text);
  for (size_t chunk : {1, 7, 64, 1000}) {
    auto points = Gpt2Pattern::split_points(text, chunk);
    ASSERT_FALSE(points.empty());
    points.push_back(text.size());
    std::vector<uint32_t> joined;
    size_t begin = 0;
    for (size_t p : points) {
      ASSERT_EQ(text[p - 1], '\n');
      gpt2().encode(text, begin, p, joined);
      begin = p;
    }
    EXPECT_EQ(joined, whole) << "chunk " << chunk;
  }
}

TEST(BpeTest, DecodeRefusesTokensPastTheVocabulary) {
  try {
    gpt2().decode({15496, 50257});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_TRUE(test::has(e.what(), "token 50257 is past the vocabulary of 50257")) << e.what();
  }
}

}  // namespace
}  // namespace ddpx::text
