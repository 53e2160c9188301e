// BERT's tokenizer (text/wordpiece.h) against transformers' BertTokenizerFast (in transformers
// 5 the `tokenizers`-backed BertTokenizer) on the same vocab.txt, token for token, uncased and
// cased, on real text: Debian's license texts and literal English, punctuation, accents, Chinese,
// Korean, emoji, control characters and white space runs. No BERT vocab.txt ships in the test
// environment, so each test trains one offline with the `tokenizers` package's WordPieceTrainer
// (BERT's normalizer and pre-tokenizer) on the license texts and a few multilingual lines: a real
// vocabulary of a few thousand pieces, in which some of the test text's characters are missing
// (those words are [UNK]).
#include "text/wordpiece.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/token_file.h"
#include "support/support.h"
#include "text/tokenize.h"

namespace ddpx::text {
namespace {

// Writes DIR/vocab.txt (trained) and, for each NAME in CASES, DIR/NAME.txt and the tokens that
// BertTokenizerFast gives it uncased (NAME.uncased) and cased (NAME.cased).
constexpr const char* kBertReference = R"(
import glob, os, numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import BertTokenizerFast
licenses = sorted(glob.glob('/usr/share/common-licenses/*'))
texts = [open(p, encoding='utf-8', errors='replace').read() for p in licenses if os.path.isfile(p)]
extra = ['Café naïve résumé Zürich façade São Paulo Ελληνικά Москва',
         '北京是中国的首都。東京 서울 한국어', 'Grüße aus Köln! 🙂 👍 ok.']
tok = Tokenizer(models.WordPiece(unk_token='[UNK]'))
tok.normalizer = normalizers.BertNormalizer(lowercase=False)
tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
trainer = trainers.WordPieceTrainer(vocab_size=3000, special_tokens=['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'])
tok.train_from_iterator(texts[:4] + extra, trainer)
tok.model.save(OUT)
vocab = os.path.join(OUT, 'vocab.txt')
lines = ('The quick brown fox -- jumped (over) the "lazy" dog\'s back; didn\'t it? 3.14 $5 50% a/b_c\n'
         'Café NAÏVE Résumé ZÜRICH façade São Paulo Ελληνικά МОСКВА Ångström Øresund İstanbul\n'
         '北京是中国的首都。我爱东京！東京タワー 서울특별시 한국어 ไทย العربية עברית\n'
         'Emoji 🙂😀 👍🏽 👨‍👩‍👧 ☕️ ✨text✨ 🥰\n'
         'White   space\t\ttabs\r\nCRLF\u3000ideographic\u00a0nbsp\u2003em \u200bzero\u200dwidth\x00nul\x0bvt\n'
         + 'x' * 101 + ' ' + 'y' * 100 + '\n'
         'naïve combining: cafe\u0301 n\u0303 \u0301alone\n')
cases = {'literal': lines}
for i, text in enumerate(texts[4:7]):
    cases['license%d' % i] = text
uncased = BertTokenizerFast(vocab=vocab, do_lower_case=True)
cased = BertTokenizerFast(vocab=vocab, do_lower_case=False)
for name, text in cases.items():
    open(os.path.join(OUT, name + '.txt'), 'w', encoding='utf-8', newline='').write(text)
    for kind, t in (('uncased', uncased), ('cased', cased)):
        ids = t(text, add_special_tokens=False)['input_ids']
        np.array(ids, dtype=np.uint32).tofile(os.path.join(OUT, name + '.' + kind))
open(os.path.join(OUT, 'cases'), 'w').write(' '.join(cases))
)";

std::vector<uint32_t> read_ids(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<uint32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

struct BertReference {
  test::TempDir dir;
  std::vector<std::string> cases;
};

const BertReference& bert_reference() {
  static BertReference ref;
  static const bool made = [] {
    auto result = test::run_python(fmt::format("OUT = {}\n", test::shell_quote(ref.dir.path())) +
                                   kBertReference);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    std::istringstream in(result.exit_code == 0 ? read_file(ref.dir.file("cases")) : "");
    for (std::string n; in >> n;) ref.cases.push_back(n);
    return true;
  }();
  (void)made;
  return ref;
}

void expect_same_ids(const WordPieceTokenizer& tok, const std::string& name, const char* kind) {
  const auto& dir = bert_reference().dir;
  std::string text = read_file(dir.file(name + ".txt"));
  auto expected = read_ids(dir.file(name + "." + kind));
  auto got = tok.encode(text);
  ASSERT_FALSE(expected.empty()) << name;
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i)
    ASSERT_EQ(got[i], expected[i])
        << name << " " << kind << ": token " << i << " of " << got.size() << " ('"
        << tok.token(got[i]) << "' for '" << tok.token(expected[i]) << "')";
  ASSERT_EQ(got.size(), expected.size()) << name << " " << kind;
}

TEST(WordPieceTest, MatchesBertTokenizerFastUncasedAndCased) {
  const auto& ref = bert_reference();
  ASSERT_GE(ref.cases.size(), 4u);
  auto uncased = WordPieceTokenizer::from_file(ref.dir.file("vocab.txt"), true);
  auto cased = WordPieceTokenizer::from_file(ref.dir.file("vocab.txt"), false);
  EXPECT_GT(uncased.vocab_size(), 1000);
  for (const auto& name : ref.cases) {
    expect_same_ids(uncased, name, "uncased");
    expect_same_ids(cased, name, "cased");
  }
  // The literal text holds words the vocabulary cannot spell, and one over 100 characters.
  auto tokens = uncased.encode(read_file(ref.dir.file("literal.txt")));
  EXPECT_GT(std::count(tokens.begin(), tokens.end(), uncased.unk()), 3);
  EXPECT_EQ(uncased.encode(std::string(101, 'x')), std::vector<uint32_t>{uncased.unk()});
}

// `data tokenize --tokenizer wordpiece`: [CLS] document [SEP] per file, the same tokens on any
// number of threads and chunks, vocab.json naming the vocab.txt and the special tokens.
TEST(WordPieceTest, TokenizeFilesWritesDocumentsBetweenClsAndSep) {
  const auto& ref = bert_reference();
  auto tok = WordPieceTokenizer::from_file(ref.dir.file("vocab.txt"), true);
  test::TempDir out;
  TokenizeOptions options;
  options.inputs = {ref.dir.file("license0.txt"), ref.dir.file("literal.txt")};
  options.tokenizer = TokenizerKind::kWordpiece;
  options.vocab = ref.dir.file("vocab.txt");
  options.val_fraction = 0;
  options.threads = 3;
  options.chunk_bytes = 500;
  options.out_dir = out.file("data");
  auto r = tokenize_files(options);
  std::vector<uint32_t> expected;
  for (const auto& path : options.inputs) {
    expected.push_back(*tok.id("[CLS]"));
    auto t = tok.encode(read_file(path));
    expected.insert(expected.end(), t.begin(), t.end());
    expected.push_back(*tok.id("[SEP]"));
  }
  auto got = io::read_token_file(out.file("data/train.bin"));
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ(got.data_ptr<int32_t>()[i], static_cast<int32_t>(expected[i])) << "token " << i;
  EXPECT_EQ(r.vocab_size, tok.vocab_size());
  auto json = read_file(out.file("data/vocab.json"));
  EXPECT_NE(json.find("\"tokenizer\": \"wordpiece\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"[MASK]\": 4"), std::string::npos) << json;
}

TEST(WordPieceTest, BadVocabularyIsRefusedNamingTheLine) {
  auto message = [](const std::string& bytes) {
    try {
      WordPieceTokenizer(parse_vocab_txt(bytes, "v.txt"), true, "v.txt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("").find("v.txt: empty"), std::string::npos);
  EXPECT_NE(message("[UNK]\nab\ncd\nab\n").find("'ab' is on line 2 and line 4"), std::string::npos);
  EXPECT_NE(message("[UNK]\n\xff\n").find("line 2 is not valid UTF-8"), std::string::npos);
  EXPECT_NE(message("a\nb\n").find("no [UNK]"), std::string::npos);
  // CRLF lines and a last line without a newline are tokens as transformers reads them.
  auto v = parse_vocab_txt("[UNK]\r\n##a\r\nb", "v.txt");
  EXPECT_EQ(v.tokens, (std::vector<std::string>{"[UNK]", "##a", "b"}));
  WordPieceTokenizer tok(v, true, "v.txt");
  EXPECT_EQ(tok.encode("Baa b c"), (std::vector<uint32_t>{2, 1, 1, 2, 0}));
  test::TempDir dir;
  test::write_bytes(dir.file("v.txt"), "[UNK]\n");
  TokenizeOptions options;
  options.inputs = {dir.file("v.txt")};
  options.tokenizer = TokenizerKind::kWordpiece;
  options.vocab = dir.file("v.txt");
  options.out_dir = dir.file("out");
  try {
    tokenize_files(options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no [CLS] token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddpx::text
