// Token files (io/token_file.h): files written by llm.c's writer (the logic of its
// dev/data/data_common.py write_datafile, run by numpy) and by nanoGPT's prepare.py (headerless
// uint16) read back token for token; ddpx's files read back by numpy as llm.c's loader checks
// them; and each kind of damage is one kData error naming the file.
#include "io/token_file.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

// llm.c's write_datafile: a 256 x int32 header (magic, version, count), then the tokens as
// uint16 ("gpt-2") or uint32 ("llama-3").
constexpr const char* kLlmcWriter = R"(
import numpy as np
HEADERS_INFO = {
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": np.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": np.uint32},
}
def write_datafile(filename, toks, model_desc="gpt-2"):
    assert len(toks) < 2**31
    info = HEADERS_INFO[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    toks_np = np.array(toks, dtype=info["token_dtype"])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())
)";

void expect_token_file_error(const std::function<void()>& fn, const std::string& file,
                             const std::string& needle) {
  try {
    fn();
    FAIL() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    std::string what = e.what();
    EXPECT_TRUE(test::has(what, file)) << what;
    EXPECT_TRUE(test::has(what, needle)) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

std::vector<int32_t> token_values(const torch::Tensor& t) {
  EXPECT_EQ(t.dtype(), torch::kInt32);
  EXPECT_EQ(t.dim(), 1);
  return {t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + t.numel()};
}

TEST(TokenFileTest, ReadsFilesWrittenByLlmcAndNanoGpt) {
  test::TempDir dir;
  // 20,000 tokens of a fixed pseudo-random stream over GPT-2's vocabulary (the last one is
  // <|endoftext|>), and one past 65535 for the uint32 file.
  auto result = test::run_python(std::string(kLlmcWriter) + fmt::format(R"(
rng = np.random.default_rng(7)
toks = rng.integers(0, 50257, size=20000).tolist() + [50256]
write_datafile('{0}/gpt2.bin', toks)
write_datafile('{0}/llama3.bin', toks + [128000, 2**31 - 1], 'llama-3')
np.array(toks, dtype=np.uint16).tofile('{0}/nanogpt.bin')
np.array(toks, dtype=np.int64).tofile('{0}/expected.i64')
)",
                                                                        dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::string expected_bytes = read_file(dir.file("expected.i64"));
  std::vector<int32_t> expected;
  for (size_t i = 0; i < expected_bytes.size(); i += 8) {
    int64_t v;
    std::memcpy(&v, expected_bytes.data() + i, 8);
    expected.push_back(static_cast<int32_t>(v));
  }
  ASSERT_EQ(expected.size(), 20001u);

  TokenFileInfo info;
  EXPECT_EQ(token_values(read_token_file(dir.file("gpt2.bin"), false, &info)), expected);
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(info.num_tokens, 20001);

  auto wide = token_values(read_token_file(dir.file("llama3.bin"), false, &info));
  EXPECT_EQ(info.version, 7);
  ASSERT_EQ(wide.size(), expected.size() + 2);
  EXPECT_EQ(std::vector<int32_t>(wide.begin(), wide.begin() + expected.size()), expected);
  EXPECT_EQ(wide[expected.size()], 128000);
  EXPECT_EQ(wide.back(), 2147483647);

  EXPECT_EQ(token_values(read_token_file(dir.file("nanogpt.bin"), /*headerless=*/true, &info)),
            expected);
  EXPECT_EQ(info.version, 0);
  EXPECT_EQ(info.num_tokens, 20001);
}

// What ddpx writes, llm.c's loader (llmc/dataloader.h) accepts: magic, version 1, and a file size
// of exactly 1024 + 2 * count; the uint32 file is what write_datafile's "llama-3" writes.
TEST(TokenFileTest, WritesWhatLlmcReads) {
  test::TempDir dir;
  std::vector<uint32_t> narrow = {50256, 15496, 11, 995, 0, 65535};
  std::vector<uint32_t> wide = {1, 65536, 128000};
  write_token_file(dir.file("narrow.bin"), narrow);
  write_token_file(dir.file("wide.bin"), wide);
  write_token_file(dir.file("empty.bin"), {});
  auto result = test::run_python(std::string(kLlmcWriter) + fmt::format(R"(
import os
def check(path, magic, version, dtype, toks):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == magic and header[1] == version and header[2] == len(toks), header[:3]
    assert not header[3:].any()
    assert os.path.getsize(path) == 1024 + len(toks) * np.dtype(dtype).itemsize
    got = np.fromfile(path, dtype=dtype, offset=1024)
    assert got.tolist() == toks, got
    write_datafile(path + '.ref', toks, 'gpt-2' if version == 1 else 'llama-3')
    assert open(path, 'rb').read() == open(path + '.ref', 'rb').read()
check('{0}/narrow.bin', 20240520, 1, np.uint16, [50256, 15496, 11, 995, 0, 65535])
check('{0}/wide.bin', 20240801, 7, np.uint32, [1, 65536, 128000])
check('{0}/empty.bin', 20240520, 1, np.uint16, [])
print('ok')
)",
                                                                        dir.path()));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(token_values(read_token_file(dir.file("wide.bin"))),
            (std::vector<int32_t>{1, 65536, 128000}));
}

std::string token_file_header(int32_t magic, int32_t version, int32_t count) {
  std::string bytes(kTokenFileHeaderBytes, '\0');
  int32_t h[3] = {magic, version, count};
  std::memcpy(bytes.data(), h, sizeof(h));
  return bytes;
}

TEST(TokenFileTest, EachKindOfDamageNamesTheFile) {
  test::TempDir dir;
  auto file = [&](const std::string& name, const std::string& bytes) {
    test::write_bytes(dir.file(name), bytes);
    return dir.file(name);
  };
  std::string four_tokens(8, '\x01');
  auto missing = dir.file("missing.bin");
  expect_token_file_error([&] { read_token_file(missing); }, missing, "no such token file");
  auto magic = file("magic.bin", token_file_header(1234, 1, 4) + four_tokens);
  expect_token_file_error([&] { read_token_file(magic); }, magic, "magic number is 1234");
  auto version = file("version.bin", token_file_header(kTokenFileMagic, 3, 4) + four_tokens);
  expect_token_file_error([&] { read_token_file(version); }, version, "version 3");
  auto truncated = file("truncated.bin", token_file_header(kTokenFileMagic, 1, 5) + four_tokens);
  expect_token_file_error([&] { read_token_file(truncated); }, truncated, "truncated");
  auto trailing = file("trailing.bin", token_file_header(kTokenFileMagic, 1, 3) + four_tokens);
  expect_token_file_error([&] { read_token_file(trailing); }, trailing, "trailing bytes");
  auto negative = file("negative.bin", token_file_header(kTokenFileMagic, 1, -4) + four_tokens);
  expect_token_file_error([&] { read_token_file(negative); }, negative, "promises -4 tokens");
  auto half = file("half.bin", token_file_header(kTokenFileMagic, 7, 2) + std::string(6, '\0'));
  expect_token_file_error([&] { read_token_file(half); }, half,
                          "not a whole number of 4-byte tokens");
  auto short_file = file("short.bin", four_tokens);
  expect_token_file_error([&] { read_token_file(short_file); }, short_file, "headerless");
  auto odd = file("odd.bin", std::string(7, '\0'));
  expect_token_file_error([&] { read_token_file(odd, /*headerless=*/true); }, odd, "odd length");
  auto huge =
      file("huge.bin", token_file_header(kTokenFileMagicUint32, 7, 1) + std::string(4, '\xff'));
  expect_token_file_error([&] { read_token_file(huge); }, huge, "past any vocabulary");
}

}  // namespace
}  // namespace ddpx::io
