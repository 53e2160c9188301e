// `ddpx data tokenize` and the text downloads as a user runs them: token files that llm.c's
// format check accepts, one-line refusals with exit codes (1 for bad input, 2 for a bad flag)
// that leave the previous files alone, and `data download gpt2-vocab` from a mirror on
// 127.0.0.1 (never the internet) checked by MD5 and SHA-256.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "support/support.h"
#include "support/tiny_http_server.h"

namespace ddpx {
namespace {

namespace fs = std::filesystem;
using test::ddpx;
using test::run_command;
using test::shell_quote;

void expect_one_error_line(const test::CommandResult& r, int exit_code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  auto error = r.output.find("rror");
  ASSERT_NE(error, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', error), r.output.rfind('\n')) << "one line:\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
}

TEST(TokenizeCliTest, WritesTokenFilesAndRefusesBadInputInOneLine) {
  test::TempDir dir;
  fs::copy_file("/usr/share/common-licenses/GPL-3", dir.file("gpl.txt"));
  fs::copy_file("/usr/share/common-licenses/Apache-2.0", dir.file("apache.txt"));
  const std::string files =
      shell_quote(dir.file("gpl.txt")) + " " + shell_quote(dir.file("apache.txt"));
  auto r = run_command(
      ddpx("data tokenize " + files + " --tokenizer gpt2 --vocab " +
           shell_quote(test::gpt2_rank_file()) + " --out " + shell_quote(dir.file("out"))),
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "tokenized 2 file(s)")) << r.output;
  EXPECT_TRUE(test::has(r.output, "(gpt2, vocabulary 50257)")) << r.output;
  // llm.c's loader: magic, version 1, a size of 1024 + 2 * count; <|endoftext|> first.
  auto check = test::run_python(fmt::format(R"(
import os, numpy as np
for name in ('train', 'val'):
    path = '{0}/out/%s.bin' % name
    h = np.fromfile(path, dtype=np.int32, count=256)
    assert h[0] == 20240520 and h[1] == 1 and os.path.getsize(path) == 1024 + 2 * h[2], h[:3]
t = np.fromfile('{0}/out/train.bin', dtype=np.uint16, offset=1024)
assert t[0] == 50256 and (t == 50256).sum() == 2 and t.max() < 50257
print('ok')
)",
                                            dir.path()));
  EXPECT_EQ(check.exit_code, 0) << check.output;

  const std::string train = read_file(dir.file("out/train.bin"));
  auto unchanged = [&] { EXPECT_EQ(read_file(dir.file("out/train.bin")), train); };
  const std::string out = " --out " + shell_quote(dir.file("out"));
  expect_one_error_line(run_command(ddpx("data tokenize " + files + " --vocab " +
                                         shell_quote(dir.file("none.tiktoken")) + out),
                                    60),
                        1, "none.tiktoken: no such rank file");
  unchanged();
  test::write_bytes(dir.file("latin1.txt"), "na\xefve\n");
  expect_one_error_line(run_command(ddpx("data tokenize " + shell_quote(dir.file("latin1.txt")) +
                                         " --tokenizer char" + out),
                                    60),
                        1, "latin1.txt: byte 2 is not valid UTF-8");
  unchanged();
  expect_one_error_line(
      run_command(ddpx("data tokenize " + files + " --tokenizer words" + out), 60), 2,
      "--tokenizer");
  unchanged();
}

// The rank file from a mirror: the real one passes both checksums; one changed byte is refused
// and nothing is left behind.
TEST(TokenizeCliTest, DownloadsGpt2VocabWithChecksums) {
  test::TempDir dir;
  const std::string real = read_file(test::gpt2_rank_file());
  std::string changed = real;
  changed[changed.size() / 2] ^= 1;
  {
    test::TinyHttpServer server({{"/r50k_base.tiktoken", changed}});
    expect_one_error_line(
        run_command(ddpx("data download gpt2-vocab --data_dir " + shell_quote(dir.file("bad")) +
                         " --mirror " + server.url()),
                    60),
        1, "MD5 is");
    EXPECT_FALSE(fs::exists(dir.file("bad/r50k_base.tiktoken")));
    EXPECT_FALSE(fs::exists(dir.file("bad/r50k_base.tiktoken.part")));
  }
  test::TinyHttpServer server({{"/r50k_base.tiktoken", real}});
  auto r = run_command(ddpx("data download gpt2-vocab --data_dir " + shell_quote(dir.file("v")) +
                            " --mirror " + server.url()),
                       60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "gpt2-vocab is ready in")) << r.output;
  EXPECT_EQ(read_file(dir.file("v/r50k_base.tiktoken")), real);
}

}  // namespace
}  // namespace ddpx
