// Tar shards through libarchive (io/tar_shard.h) against a real writer and reader, Python's
// tarfile: members listed from its ustar, pax (long names) and GNU tars sit at the offsets
// tarfile says and hold its bytes; ddpx's writer's tars read back in tarfile name for name and
// byte for byte; a cut, compressed or linked shard is refused with a line naming it.
#include "io/tar_shard.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

namespace fs = std::filesystem;

// Writes `path` with Python's tarfile in `format` (USTAR_FORMAT, PAX_FORMAT, GNU_FORMAT); each
// member's data is its name repeated to `size` bytes. Prints "name offset_data size" lines.
std::string python_tar(const std::string& path, const std::string& format) {
  auto r = test::run_python(R"(
import io, tarfile
long = 140 if tarfile.)" + format +
                            R"( != tarfile.USTAR_FORMAT else 80
members = [("000000.jpg", 3000), ("000000.cls", 1), ("sub/000001.png", 700),
           ("sub/000001.cls", 2), ("n01440764/" + "x" * long + ".JPEG", 513),
           ("n01440764/" + "x" * long + ".cls", 3), ("empty.txt", 0)]
with tarfile.open(")" + path +
                            R"(", "w", format=tarfile.)" + format + R"() as t:
    d = tarfile.TarInfo("sub"); d.type = tarfile.DIRTYPE; t.addfile(d)
    for name, size in members:
        info = tarfile.TarInfo(name); info.size = size
        t.addfile(info, io.BytesIO((name.encode() * (size // len(name) + 1))[:size]))
with tarfile.open(")" + path +
                            R"(") as t:
    for m in t.getmembers():
        if m.isfile(): print(m.name, m.offset_data, m.size)
)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

std::string expected_bytes(const std::string& name, int64_t size) {
  std::string out;
  while (static_cast<int64_t>(out.size()) < size) out += name;
  return out.substr(0, size);
}

TEST(TarShardTest, ListsPythonTarfilesMembersWhereTarfileSaysTheyAre) {
  test::TempDir dir;
  for (const std::string format : {"USTAR_FORMAT", "PAX_FORMAT", "GNU_FORMAT"}) {
    const std::string path = dir.file(format + ".tar");
    std::istringstream lines(python_tar(path, format));
    const auto members = list_tar(path);
    size_t k = 0;
    for (std::string name; lines >> name;) {
      int64_t offset = 0, size = 0;
      lines >> offset >> size;
      ASSERT_LT(k, members.size()) << format;
      EXPECT_EQ(members[k].name, name) << format;
      EXPECT_EQ(members[k].offset, offset) << format << " " << name;
      EXPECT_EQ(members[k].size, size) << format << " " << name;
      EXPECT_EQ(read_tar_member(path, members[k].offset, members[k].size),
                expected_bytes(name, size))
          << format << " " << name;
      if (size <= kTarInlineBytes) EXPECT_EQ(members[k].data, expected_bytes(name, size));
      ++k;
    }
    EXPECT_EQ(k, 7u) << format;
    EXPECT_EQ(members.size(), 7u) << format << ": the folder entry is not a member";
  }
}

TEST(TarShardTest, WritersTarsReadBackInPythonsTarfile) {
  test::TempDir dir;
  const std::string path = dir.file("train-000000.tar");
  const std::string long_name = "n01440764/" + std::string(150, 'y') + ".jpeg";
  {
    TarWriter w(path);
    w.add("00000000.jpg", std::string(1000, '\xAB'));
    w.add("00000000.cls", "7");
    w.add(long_name, std::string(513, 'z'));
    EXPECT_FALSE(fs::exists(path)) << "the shard appears only when finished";
    w.finish();
  }
  auto r = test::run_python(R"(
import tarfile
with tarfile.open(")" + path +
                            R"(") as t:
    for m in t.getmembers():
        data = t.extractfile(m).read()
        print(m.name, m.size, len(set(data)), data[:1].hex())
)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "00000000.jpg 1000 1 ab\n00000000.cls 1 1 37\n" + long_name + " 513 1 7a\n");
  const auto members = list_tar(path);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[1].data, "7");
  EXPECT_EQ(members[2].name, long_name);

  {  // an unfinished writer leaves nothing
    TarWriter w(dir.file("train-000001.tar"));
    w.add("a.cls", "1");
  }
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "train-000000.tar") << "left behind: " << e.path();
}

TEST(TarShardTest, RefusesACutShardACompressedOneAndALink) {
  test::TempDir dir;
  const std::string path = dir.file("whole.tar");
  python_tar(path, "USTAR_FORMAT");
  const std::string whole = read_tar_member(path, 0, fs::file_size(path));
  auto message = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Cut in the middle of the first member's data (3000 bytes from 512).
  const std::string cut = dir.file("cut.tar");
  test::write_bytes(cut, whole.substr(0, 2000));
  const std::string m = message([&] { list_tar(cut); });
  EXPECT_TRUE(test::has(m, cut + ": ")) << m;
  EXPECT_TRUE(test::has(m, "cut short") || test::has(m, "runcated")) << m;

  auto r = test::run_command("gzip -k " + test::shell_quote(path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string gz = message([&] { list_tar(path + ".gz"); });
  EXPECT_TRUE(test::has(gz, path + ".gz: not a readable uncompressed tar")) << gz;
  EXPECT_TRUE(test::has(gz, "unpack a compressed one")) << gz;

  const std::string linked = dir.file("link.tar");
  r = test::run_python(R"(
import tarfile
with tarfile.open(")" + linked +
                       R"(", "w") as t:
    i = tarfile.TarInfo("000000.jpg"); i.type = tarfile.SYMTYPE; i.linkname = "/etc/passwd"
    t.addfile(i)
)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string link = message([&] { list_tar(linked); });
  EXPECT_TRUE(test::has(link, linked + ": member '000000.jpg' is a link")) << link;

  const std::string gone = message([&] { list_tar(dir.file("nowhere.tar")); });
  EXPECT_TRUE(test::has(gone, dir.file("nowhere.tar") + ": cannot read it")) << gone;
}

}  // namespace
}  // namespace ddpx::io
