// gunzip and read_maybe_gzip (io/gzip.h) on streams written by Python's gzip: one member or
// several read back exactly, and truncation, corruption and bombs are one kData error each.
#include "io/gzip.h"

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

// Writes `dir`/one.gz (bytes 0..255 four times), two.gz (two members: "ab", "cd") and
// zeros.gz (1 MiB of zeros).
void write_gzips_with_python(const test::TempDir& dir) {
  auto result = test::run_python(fmt::format(R"(
import gzip
d = '{}'
open(d + '/one.gz', 'wb').write(gzip.compress(bytes(range(256)) * 4))
open(d + '/two.gz', 'wb').write(gzip.compress(b'ab') + gzip.compress(b'cd'))
open(d + '/zeros.gz', 'wb').write(gzip.compress(bytes(1 << 20)))
)",
                                             dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
}

std::string gzip_rejection(const std::string& bytes, int64_t max_bytes = kMaxInflatedBytes) {
  try {
    gunzip(bytes, "x.gz", max_bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    EXPECT_NE(std::string(e.what()).find("x.gz"), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "bad gzip bytes were accepted";
  return "";
}

TEST(GzipTest, ReadsOneOrSeveralMembersWrittenByPython) {
  test::TempDir dir;
  write_gzips_with_python(dir);
  std::string one = read_maybe_gzip(dir.file("one.gz"));
  ASSERT_EQ(one.size(), 1024u);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(static_cast<uint8_t>(one[i]), i % 256);
  EXPECT_EQ(read_maybe_gzip(dir.file("two.gz")), "abcd");
  test::write_bytes(dir.file("plain"), "not gzip");
  EXPECT_EQ(read_maybe_gzip(dir.file("plain")), "not gzip");  // read as it is
}

TEST(GzipTest, TruncatedCorruptAndOversizedStreamsAreRefused) {
  test::TempDir dir;
  write_gzips_with_python(dir);
  const std::string one = read_file(dir.file("one.gz"));
  EXPECT_NE(gzip_rejection(one.substr(0, one.size() / 2)).find("truncated"), std::string::npos);
  std::string flipped = one;
  flipped[one.size() - 6] ^= 0x55;  // inside the CRC-32 of the trailer
  EXPECT_NE(gzip_rejection(flipped).find("corrupt gzip data"), std::string::npos);
  const std::string zeros = read_file(dir.file("zeros.gz"));
  EXPECT_NE(gzip_rejection(zeros, 1 << 19).find("inflates to more than 524288 bytes"),
            std::string::npos);
  EXPECT_EQ(gunzip(zeros, "x.gz", 1 << 20).size(), 1u << 20);
}

}  // namespace
}  // namespace ddpx::io
