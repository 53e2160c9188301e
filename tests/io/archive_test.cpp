// Unpacking archives (io/archive.h) written by Python's tarfile: contents land as written, and
// entries that would leave the destination, links and decompression bombs are refused with
// nothing left behind.
#include "io/archive.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

namespace fs = std::filesystem;

void run(const std::string& script) {
  auto result = test::run_python("import io, tarfile\n" + script);
  ASSERT_EQ(result.exit_code, 0) << result.output;
}

TEST(ArchiveTest, UnpacksWhatTarfileWroteFromAFileAndFromBytes) {
  test::TempDir dir;
  run("with tarfile.open('" + dir.file("a.tar.gz") + "', 'w:gz') as t:\n" +
      "    for name, data in (('set/x.bin', bytes(range(256)) * 3), ('set/sub/y.txt', b'y\\n')):\n"
      "        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n");
  extract_archive(dir.file("a.tar.gz"), dir.file("from_file"));
  extract_archive_bytes(read_file(dir.file("a.tar.gz")), "a.tar.gz", dir.file("from_bytes"));
  for (const char* dest : {"from_file", "from_bytes"}) {
    SCOPED_TRACE(dest);
    std::string x = read_file(dir.file(std::string(dest) + "/set/x.bin"));
    ASSERT_EQ(x.size(), 768u);
    EXPECT_EQ(static_cast<uint8_t>(x[300]), 300 % 256);
    EXPECT_EQ(read_file(dir.file(std::string(dest) + "/set/sub/y.txt")), "y\n");
  }
}

TEST(ArchiveTest, CannotWriteOutsideTheDestination) {
  test::TempDir dir;
  fs::create_directories(dir.file("dest"));
  for (const char* evil : {"../evil.txt", "/tmp/ddpx-evil-abs.txt", "ok/../../evil.txt"}) {
    run("with tarfile.open('" + dir.file("evil.tar.gz") + "', 'w:gz') as t:\n    i = " +
        "tarfile.TarInfo('" + evil + "'); i.size = 4; t.addfile(i, io.BytesIO(b'evil'))\n");
    EXPECT_THROW(extract_archive(dir.file("evil.tar.gz"), dir.file("dest")), Error) << evil;
    EXPECT_FALSE(fs::exists(dir.file("evil.txt")));
    EXPECT_FALSE(fs::exists("/tmp/ddpx-evil-abs.txt"));
  }
  run("with tarfile.open('" + dir.file("link.tar.gz") + "', 'w:gz') as t:\n" +
      "    i = tarfile.TarInfo('link'); i.type = tarfile.SYMTYPE; i.linkname = '/etc/passwd'\n" +
      "    t.addfile(i)\n");
  EXPECT_THROW(extract_archive(dir.file("link.tar.gz"), dir.file("dest")), Error);
  EXPECT_FALSE(fs::exists(dir.file("dest/link")));
  EXPECT_TRUE(fs::is_empty(dir.file("dest")));  // no staging folder left behind
}

// 1 MiB of zeros packs into about a kilobyte: past the cap it is refused, and nothing stays.
TEST(ArchiveTest, MoreContentThanTheCapIsRefused) {
  test::TempDir dir;
  run("with tarfile.open('" + dir.file("bomb.tar.gz") + "', 'w:gz') as t:\n" +
      "    i = tarfile.TarInfo('zeros'); i.size = 1 << 20; t.addfile(i, "
      "io.BytesIO(bytes(i.size)))\n");
  const std::string bytes = read_file(dir.file("bomb.tar.gz"));
  try {
    extract_archive_bytes(bytes, "bomb.tar.gz", dir.file("dest"), 1 << 19);
    FAIL() << "a 1 MiB entry passed a 512 KiB cap";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(std::string(e.what()).find("bomb.tar.gz: unpacks to more than 524288 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir.file("dest")));
  extract_archive_bytes(bytes, "bomb.tar.gz", dir.file("dest"), 1 << 20);  // exactly fits
  EXPECT_EQ(fs::file_size(dir.file("dest/zeros")), 1u << 20);
}

// Garbage, and every input that once broke the reader (fuzz/regressions/archive/: one made
// libarchive give no error text, and formatting the NULL threw past the reader).
TEST(ArchiveTest, GarbageAndFuzzFindingsAreADataErrorNamingTheSource) {
  test::TempDir dir;
  std::vector<std::string> inputs = {std::string(100, '\x1f')};
  for (const auto& entry :
       fs::directory_iterator(test::source_dir() + "/fuzz/regressions/archive")) {
    inputs.push_back(read_file(entry.path().string()));
  }
  ASSERT_GE(inputs.size(), 2u);
  for (const std::string& bytes : inputs) {
    try {
      extract_archive_bytes(bytes, "junk.tar.gz", dir.file("dest"));
      ADD_FAILURE() << "garbage was unpacked";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(std::string(e.what()).find("junk.tar.gz"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ddpx::io
