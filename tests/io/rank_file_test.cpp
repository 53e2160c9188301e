// tiktoken rank files (io/rank_file.h): GPT-2's file as tiktoken's load_tiktoken_bpe reads it,
// and each way a file can fail to be one is a one-line kData error naming the file and line.
#include "io/rank_file.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

void expect_rank_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    std::string what = e.what();
    EXPECT_TRUE(test::has(what, needle)) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// The 256 single bytes, as a byte-level rank file starts (ranks 0..255), then `extra` lines.
std::string byte_ranks(const std::string& extra = "") {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (int b = 0; b < 256; ++b)
    out += fmt::format("{}{}== {}\n", alphabet[b >> 2], alphabet[(b & 3) << 4], b);
  return out + extra;
}

TEST(RankFileTest, ReadsGpt2sAsTiktokenDoes) {
  RankFile file = read_rank_file(test::gpt2_rank_file());
  ASSERT_EQ(file.tokens.size(), 50256u);
  test::TempDir dir;
  // tiktoken's own reader, every token written out by rank.
  auto result =
      test::run_python(fmt::format(R"(
import tiktoken.load
ranks = tiktoken.load.load_tiktoken_bpe({})
by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
assert [r for _, r in by_rank] == list(range(len(by_rank)))
open('{}/tokens', 'wb').write(b''.join(len(t).to_bytes(1, 'little') + t for t, _ in by_rank))
)",
                                   test::shell_quote(test::gpt2_rank_file()), dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::string packed = read_file(dir.file("tokens"));
  size_t at = 0;
  for (size_t r = 0; r < file.tokens.size(); ++r) {
    ASSERT_LT(at, packed.size());
    size_t n = static_cast<uint8_t>(packed[at]);
    ASSERT_EQ(file.tokens[r], packed.substr(at + 1, n)) << "rank " << r;
    at += 1 + n;
  }
  EXPECT_EQ(at, packed.size());
  EXPECT_EQ(file.tokens[15496], "Hello");
  EXPECT_EQ(file.tokens[995], " world");
}

TEST(RankFileTest, RefusesWhatIsNotARankFile) {
  EXPECT_EQ(parse_rank_file(byte_ranks("dGg= 256\n"), "ok").tokens.at(256), "th");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg 256\n"), "r.tiktoken"); },
                    "r.tiktoken: line 257: the token is not valid base64");
  expect_rank_error([] { parse_rank_file(byte_ranks("d!g= 256\n"), "r"); }, "not valid base64");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg= 255\n"), "r"); },
                    "line 257: rank 255 is already given on line 256");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg= 257\n"), "r"); },
                    "rank 256 is missing (257 lines, ranks up to 257)");
  expect_rank_error([] { parse_rank_file(byte_ranks("QQ== 256\n"), "r"); },
                    "line 257: the token of rank 256 is already rank 65");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg= x\n"), "r"); },
                    "line 257: the rank is not a number");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg= -1\n"), "r"); }, "not a number");
  expect_rank_error([] { parse_rank_file(byte_ranks("dGg=\n"), "r"); },
                    "line 257 is not `BASE64 RANK`");
  expect_rank_error([] { parse_rank_file("", "empty"); }, "empty: no tokens");
  expect_rank_error([] { parse_rank_file("dGg= 0\n", "r"); }, "single byte 0x00 is not a token");
  test::TempDir dir;
  expect_rank_error([&] { read_rank_file(dir.file("absent.tiktoken")); },
                    "absent.tiktoken: no such rank file; get GPT-2's with `ddpx data download "
                    "gpt2-vocab`");
  // A text file given as --vocab by mistake.
  test::write_bytes(dir.file("license"), read_file("/usr/share/common-licenses/GPL-3"));
  expect_rank_error([&] { read_rank_file(dir.file("license")); },
                    "line 1: the rank is not a number");
}

}  // namespace
}  // namespace ddpx::io
