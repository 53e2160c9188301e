// `ddpx data download` and `ddpx data info` as a user runs them, against a mirror on 127.0.0.1
// (never the internet) serving a small MNIST in the official layout (the four idx .gz files):
// the refusal of files whose MD5 is not the expected one, a connection cut mid-file and the run
// after it that fetches only what is missing, and `data info` reading what was downloaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "e2e/mnist_fixture.h"
#include "support/support.h"
#include "support/tiny_http_server.h"

namespace ddpx {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::write_small_mnist;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using test::ddpx;

// The error is one line naming what failed; the command exits 1.
void expect_one_error_line(const test::CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto error = r.output.find("error:");
  ASSERT_NE(error, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', error), r.output.rfind('\n')) << "one line:\n" << r.output;
  EXPECT_NE(r.output.find(needle, error), std::string::npos) << needle << "\n" << r.output;
}

TEST(DataCliTest, DownloadRefusesWrongChecksumsResumesAfterACutAndInfoReadsTheFiles) {
  test::TempDir dir;
  const std::string served = dir.file("served");
  fs::create_directories(served);
  write_small_mnist(served);
  std::map<std::string, std::string> files;
  for (const char* name : test::kMnistFiles)
    files["/" + std::string(name)] = read_file(served + "/" + name);
  // The test images' connection is cut mid-body the first time they are asked for.
  test::TinyHttpServer server(files, {"/t10k-images-idx3-ubyte.gz"}, /*cut_once=*/true);

  // 1. The official checksums: the mirror's (other) files are refused, nothing is kept.
  const std::string refused = dir.file("refused");
  auto r = run_command(
      ddpx("data download mnist --data_dir " + refused + " --mirror " + server.url()), 60);
  expect_one_error_line(r, "train-images-idx3-ubyte.gz: MD5 is ");
  EXPECT_NE(r.output.find("expected f68b3c2dcbeaaa9fbdd348bbdeb94873"), std::string::npos)
      << r.output;
  EXPECT_TRUE(listing(refused).empty()) << "nothing kept of a refused file";

  // 2. With the mirror's own checksums: the cut connection fails on the test images, after the
  // two train files were verified and kept; no half file is left.
  const std::string data = dir.file("mnist");
  const std::string download = "data download mnist --data_dir " + data + " --mirror " +
                               server.url() + " --checksums " + served + "/MD5SUMS";
  r = run_command(ddpx(download), 60);
  expect_one_error_line(r, "t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(listing(data),
            (std::vector<std::string>{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}));

  // 3. The same command again (the mirror from DDPX_DATA_MIRROR this time) fetches only the
  // missing files and ends with all four, byte for byte the served ones.
  r = run_command(
      "DDPX_DATA_MIRROR=" + server.url() + " " +
          ddpx("data download mnist --data_dir " + data + " --checksums " + served + "/MD5SUMS"),
      60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train-images-idx3-ubyte.gz is already present and verified"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("mnist is ready in " + data), std::string::npos) << r.output;
  EXPECT_EQ(server.requests("/train-images-idx3-ubyte.gz"), 2) << "refused once, fetched once";
  EXPECT_EQ(server.requests("/t10k-images-idx3-ubyte.gz"), 2) << "cut once, then fetched";
  EXPECT_EQ(server.requests("/t10k-labels-idx1-ubyte.gz"), 1);
  for (const char* name : test::kMnistFiles)
    EXPECT_EQ(read_file(data + "/" + name), files["/" + std::string(name)]) << name;

  // 4. `data info` reads the downloaded files: sizes, shape, classes and the train statistics.
  r = run_command(ddpx("data info mnist --data_dir " + data), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mnist: train 20 test 10 images of 28x28x1, 10 classes"),
            std::string::npos)
      << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(mean ([0-9.]+) std ([0-9.]+))")))
      << r.output;
  std::istringstream stats(read_file(served + "/stats"));
  double mean = 0, std = 0;
  stats >> mean >> std;
  EXPECT_NEAR(std::stod(m[1]), mean, 1e-4) << r.output;
  EXPECT_NEAR(std::stod(m[2]), std, 1e-4) << r.output;
}

TEST(DataCliTest, ABadChecksumsFileIsAUsageErrorNamingTheLine) {
  test::TempDir dir;
  std::ofstream(dir.file("sums"))
      << "f68b3c2dcbeaaa9fbdd348bbdeb94873  train-images-idx3-ubyte.gz\n"
      << "not-a-checksum  train-labels-idx1-ubyte.gz\n";
  auto r = run_command(ddpx("data download mnist --data_dir " + dir.file("d") +
                            " --mirror http://127.0.0.1:9/ --checksums " + dir.file("sums")),
                       60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("sums") + " line 2: expected 'MD5  FILE'"), std::string::npos)
      << r.output;
  std::ofstream(dir.file("short"))
      << "f68b3c2dcbeaaa9fbdd348bbdeb94873  train-images-idx3-ubyte.gz\n";
  r = run_command(ddpx("data download mnist --data_dir " + dir.file("d") +
                       " --mirror http://127.0.0.1:9/ --checksums " + dir.file("short")),
                  60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("lists no MD5 for train-labels-idx1-ubyte.gz"), std::string::npos)
      << r.output;
  EXPECT_TRUE(listing(dir.file("d")).empty()) << "nothing fetched before the list is complete";
}

}  // namespace
}  // namespace ddpx
