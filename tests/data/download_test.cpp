// Downloads from a tiny HTTP server on 127.0.0.1 inside the test (never the internet): a good
// archive, a wrong checksum, a 404, and a connection that stops mid-file.
#include "data/download.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "support/support.h"
#include "support/tiny_http_server.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;
using test::TinyHttpServer;

// A tar.gz holding hello/world.txt, written by Python's tarfile.
std::string small_archive(const test::TempDir& dir) {
  auto result = test::run_python(fmt::format(R"(
import io, tarfile
with tarfile.open('{}', 'w:gz') as t:
    data = b'hello from the mirror\n' * 1000
    i = tarfile.TarInfo('hello/world.txt'); i.size = len(data); t.addfile(i, io.BytesIO(data))
)",
                                             dir.file("small.tar.gz")));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return read_file(dir.file("small.tar.gz"));
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    names.push_back(fs::relative(e.path(), dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(DownloadTest, FetchesVerifiesAndUnpacks) {
  test::TempDir dir;
  std::string archive = small_archive(dir);
  TinyHttpServer server({{"/small.tar.gz", archive}});
  std::string md5 = md5_file(dir.file("small.tar.gz"));
  DownloadOptions options;
  options.mirror = server.url();
  fetch_file({"https://unused.invalid/", "small.tar.gz", md5, true}, dir.file("out"), options);
  EXPECT_EQ(read_file(dir.file("out/small.tar.gz")), archive);
  EXPECT_EQ(read_file(dir.file("out/hello/world.txt")).size(), 22u * 1000);
  EXPECT_EQ(listing(dir.file("out")),
            (std::vector<std::string>{"hello", "hello/world.txt", "small.tar.gz"}));
}

TEST(DownloadTest, Md5MatchesPython) {
  test::TempDir dir;
  small_archive(dir);
  auto result = test::run_python(
      fmt::format("import hashlib\nprint(hashlib.md5(open('{}', 'rb').read()).hexdigest())",
                  dir.file("small.tar.gz")));
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(md5_file(dir.file("small.tar.gz")) + "\n", result.output);
}

void expect_failure_leaves_nothing(const TinyHttpServer& server, const std::string& name,
                                   ErrorKind kind, const std::string& needle) {
  test::TempDir dir;
  DownloadOptions options;
  options.data_dir = dir.path();
  options.mirror = server.url();
  options.stall_timeout_s = 5;
  try {
    download_dataset(name, options);
    FAIL() << "expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(listing(dir.path()).empty()) << "a partial file was left in " << dir.path();
}

TEST(DownloadTest, WrongChecksumLeavesNoFile) {
  test::TempDir dir;
  // The mirror serves a valid archive that is not the official one.
  TinyHttpServer server({{"/cifar-10-python.tar.gz", small_archive(dir)}});
  expect_failure_leaves_nothing(server, "cifar10", ErrorKind::kData,
                                "expected c58f30108f718f92721af3b95e74349a");
}

TEST(DownloadTest, HttpErrorLeavesNoFile) {
  TinyHttpServer server({});
  expect_failure_leaves_nothing(server, "mnist", ErrorKind::kIo, "404");
}

TEST(DownloadTest, ConnectionClosedMidFileLeavesNoFile) {
  test::TempDir dir;
  TinyHttpServer server({{"/cifar-100-python.tar.gz", small_archive(dir)}},
                        {"/cifar-100-python.tar.gz"});
  expect_failure_leaves_nothing(server, "cifar100", ErrorKind::kIo, "cifar-100-python.tar.gz");
}

TEST(DownloadTest, UnknownDatasetIsAUsageError) {
  EXPECT_THROW(remote_files("imagenet"), Error);
  EXPECT_EQ(remote_files("fashion-mnist").size(), 4u);
  EXPECT_TRUE(remote_files("cifar100").at(0).unpack);
}

}  // namespace
}  // namespace ddpx::data
