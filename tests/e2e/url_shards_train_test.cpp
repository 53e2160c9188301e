// `--data_url`: tar shards packed by `ddpx data pack` from a folder of real photographs, served
// by a real HTTP server on 127.0.0.1 (tests/support/tiny_http_server.h: byte ranges, 404s, cut
// and stalled bodies) and trained on as a user would. From the URLs a run sees exactly the
// batches the same shards on disk give (the same losses, digit for digit); 2 ranks read disjoint
// shards, every sample once an epoch, and run the same number of steps; validation shards from
// `--val_url` score as the same shards on disk; a missing shard or index, a refused port, a cut
// shard and a stalled server each stop the run with one line naming the URL, well within a bound.
// `ddpx bench loader --data_url` times the loader alone on the same served shards.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/support.h"
#include "support/tiny_http_server.h"

namespace ddpx {
namespace {

namespace fs = std::filesystem;
using test::ddpx;
using test::has;
using test::run_command;

std::string served_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The photo folder packed one sample a shard (20 shards of 4 classes), and every file of the
// shards' folder by its path on the server, /shards/NAME.
struct ServedShards {
  test::PhotoFolder photos{5};
  std::string dir = photos.file("shards");
  std::map<std::string, std::string> files;

  ServedShards() {
    auto r =
        run_command(ddpx("data pack " + photos.root() + " --out " + dir + " --shard_size 1"), 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const auto& e : fs::directory_iterator(dir))
      files["/shards/" + e.path().filename().string()] = served_bytes(e.path().string());
  }
};

constexpr const char* kUrlTrain =
    "train --model resnet20 --val_split 0.25 --batch_size 4 --image_size 32 --optimizer adamw "
    "--learning_rate 0.004 --seed 1 --loader_workers 2 --threads 1 ";

std::string shard_pattern(const test::TinyHttpServer& server) {
  return "'" + server.url() + "shards/train-{000000..000019}.tar'";
}

// Every line of the run's progress: the losses and accuracies.
std::vector<double> url_curve(const std::string& output) {
  std::vector<double> out = test::numbers_after(output, "loss_train");
  for (double a : test::numbers_after(output, "Accuracy on test dataset")) out.push_back(a);
  return out;
}

TEST(UrlShardsTrainTest, TrainingFromUrlsSeesTheBatchesOfTheSameShardsOnDisk) {
  ServedShards shards;
  test::TinyHttpServer server(shards.files);
  auto local = run_command(ddpx(std::string(kUrlTrain) +
                                "--num_epochs 2 --dataset shards "
                                "--data_dir " +
                                shards.dir),
                           300);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  auto remote = run_command(
      ddpx(std::string(kUrlTrain) + "--num_epochs 2 --data_url " + shard_pattern(server)), 300);
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  EXPECT_TRUE(has(remote.output, "dataset shards from " + server.url() +
                                     "shards (20 shards, 0.25 "
                                     "held out"))
      << remote.output;
  const std::vector<double> a = url_curve(local.output), b = url_curve(remote.output);
  ASSERT_GE(a.size(), 3u) << local.output;
  EXPECT_EQ(a, b) << "local:\n" << local.output << "\nremote:\n" << remote.output;
  // Classes from classes.txt beside the shards, and every index fetched once.
  EXPECT_EQ(server.requests("/shards/classes.txt"), 1);
  EXPECT_EQ(server.requests("/shards/train-000007.tar.idx"), 1);
}

TEST(UrlShardsTrainTest, TwoRanksReadDisjointShardsAndRunTheSameNumberOfSteps) {
  ServedShards shards;
  test::TinyHttpServer server(shards.files);
  test::TempDir logs;
  auto r = run_command(ddpx("run 2 --log_dir " + logs.path() + " -- " + kUrlTrain +
                            "--num_epochs 1 --data_url " + shard_pattern(server)),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "shards: 15 over 2 rank(s), 8 samples each an epoch: every one of the 15 once, "
                  "1 repeated to even the ranks"))
      << r.output;
  // One epoch: each of the 15 training samples read once, one again to even the ranks, and
  // each of the 5 held out once by the evaluation (whose ranks take every other sample).
  int total = 0;
  for (int k = 0; k < 20; ++k) {
    const int n = server.requests(fmt::format("/shards/train-{:06d}.tar", k));
    EXPECT_GE(n, 1) << "shard " << k << " was never read";
    total += n;
  }
  EXPECT_EQ(total, 21) << r.output;
}

// `ddpx bench loader --data_url`: the loader alone on the served shards, read whole (no sample
// held out for validation, as for an image folder): 5 batches of 4, one warmup batch, then 16
// timed images in the printed images/s line, and every shard fetched.
TEST(UrlShardsTrainTest, BenchLoaderTimesTheShardsReadFromTheServer) {
  ServedShards shards;
  test::TinyHttpServer server(shards.files);
  const std::string pattern = server.url() + "shards/train-{000000..000019}.tar";
  const std::string json = shards.photos.file("loader.json");
  auto r =
      run_command(ddpx("bench loader --data_url '" + pattern +
                       "' --batch_size 4 --warmup 1 --image_size 32 --workers 2 --json " + json),
                  120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "bench loader: shards " + pattern +
                                " (20 images), 2 worker thread(s), batch 4, fast decode"))
      << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(
          R"(images/s: ([0-9.]+) \(([0-9]+) images in ([0-9.]+) s after 1 warmup batches\))")))
      << r.output;
  EXPECT_EQ(std::stoi(m[2]), 16) << "the 20 less the warmup batch of 4\n" << r.output;
  EXPECT_GT(std::stod(m[1]), 0) << r.output;
  EXPECT_TRUE(has(r.output, "(tar headers scanned)")) << r.output;
  std::ifstream in(json);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << r.output;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["dataset"], "shards") << line;
  EXPECT_EQ(j["images"], 20) << line;
  EXPECT_EQ(j["timed_images"], 16) << line;
  EXPECT_EQ(j["image_size"], 32) << line;
  int read = 0;
  for (int k = 0; k < 20; ++k)
    read += server.requests(fmt::format("/shards/train-{:06d}.tar", k)) > 0;
  EXPECT_EQ(read, 20) << "every shard read once or more\n" << r.output;
}

// The one line the run ends with, and how long it took.
struct UrlFailure {
  test::CommandResult result;
  double seconds = 0;
};

UrlFailure train_from_failing_url(const std::string& env, const std::string& url) {
  const auto start = std::chrono::steady_clock::now();
  UrlFailure f;
  f.result = run_command(
      env + " " +
          ddpx(std::string(kUrlTrain) + "--num_epochs 1 --limit_train_batches 2 --data_url " + url),
      120);
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return f;
}

// `--val_url`: validation shards on the server beside the training ones (the folder packed
// again as val-*.tar) are evaluated as the same shards on disk are, every one of them read, with
// the same faults named by URL.
TEST(UrlShardsTrainTest, ValidationShardsFromValUrlScoreAsTheSameShardsOnDisk) {
  ServedShards shards;
  auto pack = run_command(ddpx("data pack " + shards.photos.root() + " --out " + shards.dir +
                               " --shard_size 1 --prefix val"),
                          120);
  ASSERT_EQ(pack.exit_code, 0) << pack.output;
  for (const auto& e : fs::directory_iterator(shards.dir))
    shards.files["/shards/" + e.path().filename().string()] = served_bytes(e.path().string());
  ASSERT_TRUE(shards.files.count("/shards/val-000019.tar.idx")) << "20 validation shards";
  test::TinyHttpServer server(shards.files);
  const std::string val = "'" + server.url() + "shards/val-{000000..000019}.tar'";
  auto local = run_command(
      ddpx(std::string(kUrlTrain) + "--num_epochs 1 --dataset shards --data_dir " + shards.dir),
      300);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  auto remote = run_command(ddpx(std::string(kUrlTrain) + "--num_epochs 1 --data_url " +
                                 shard_pattern(server) + " --val_url " + val),
                            300);
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  EXPECT_TRUE(has(remote.output, "(20 training shards, 20 validation shards)")) << remote.output;
  const std::vector<double> a = url_curve(local.output), b = url_curve(remote.output);
  ASSERT_GE(a.size(), 2u) << local.output;
  EXPECT_EQ(a, b) << "local:\n" << local.output << "\nremote:\n" << remote.output;
  for (int k = 0; k < 20; ++k)
    EXPECT_GE(server.requests(fmt::format("/shards/val-{:06d}.tar", k)), 1)
        << "validation shard " << k << " was never read";

  // A validation shard without its index, and a pattern that is no URL: one line each.
  auto files = shards.files;
  files.erase("/shards/val-000003.tar.idx");
  test::TinyHttpServer broken(files);
  auto f = train_from_failing_url("", shard_pattern(broken) + " --val_url '" + broken.url() +
                                          "shards/val-{000000..000019}.tar'");
  EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
  EXPECT_TRUE(has(f.result.output, broken.url() + "shards/val-000003.tar.idx: HTTP 404: no index "
                                                  "beside the shard"))
      << f.result.output;
  f = train_from_failing_url("", shard_pattern(broken) + " --val_url shards/val-000000.tar");
  EXPECT_EQ(f.result.exit_code, 2) << f.result.output;
  EXPECT_TRUE(has(f.result.output,
                  "--val_url shards/val-000000.tar: not an http:// or https:// URL (local "
                  "shards: --val_dir DIR)"))
      << f.result.output;
}

TEST(UrlShardsTrainTest, AMissingShardOrIndexOrARefusedPortEndsWithOneLineNamingTheUrl) {
  ServedShards shards;
  auto files = shards.files;
  files.erase("/shards/train-000004.tar.idx");
  files.erase("/shards/train-000009.tar");
  test::TinyHttpServer server(files);
  const std::string base = server.url() + "shards/";

  auto f = train_from_failing_url("", "'" + base + "train-{000000..000019}.tar'");
  EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
  EXPECT_TRUE(has(f.result.output, base +
                                       "train-000004.tar.idx: HTTP 404: no index beside the "
                                       "shard " +
                                       base + "train-000004.tar"))
      << f.result.output;

  // The index is there but the shard is not: the batch that reads it names it.
  f = train_from_failing_url("", "'" + base + "train-000009.tar " + base + "train-000010.tar'");
  EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
  EXPECT_TRUE(has(f.result.output, base + "train-000009.tar: HTTP 404 from the server; check the "
                                          "URL (--data_url)"))
      << f.result.output;

  const std::string refused = fmt::format("http://127.0.0.1:{}/shards/", test::free_port());
  f = train_from_failing_url("", "'" + refused + "train-{000000..000019}.tar'");
  EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
  EXPECT_TRUE(has(f.result.output, refused + "train-000000.tar.idx: cannot connect"))
      << f.result.output;
  EXPECT_TRUE(has(f.result.output, "is the server running")) << f.result.output;
  EXPECT_LT(f.seconds, 60);
}

TEST(UrlShardsTrainTest, AServerWithoutRangeRequestsIsRefusedBeforeItSendsAWholeShard) {
  ServedShards shards;
  test::TinyHttpServer server(shards.files);
  server.ignore_ranges();
  auto f = train_from_failing_url("", shard_pattern(server));
  EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
  EXPECT_TRUE(has(f.result.output,
                  ".tar: the server ignored the byte range (HTTP 200, not 206 "
                  "Partial Content)"))
      << f.result.output;
}

TEST(UrlShardsTrainTest, AShardCutMidMemberOrAStalledServerEndsTheRunWithinTheStallLimit) {
  ServedShards shards;
  const std::string url = "'{}shards/train-{{000000..000019}}.tar'";
  {
    // Every shard's body ends halfway, the connection closed under it.
    std::set<std::string> cut;
    for (const auto& [path, bytes] : shards.files)
      if (path.size() > 4 && path.compare(path.size() - 4, 4, ".tar") == 0) cut.insert(path);
    test::TinyHttpServer server(shards.files, cut);
    auto f = train_from_failing_url("", fmt::format(url, server.url()));
    EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
    EXPECT_TRUE(has(f.result.output, ".tar: the connection ended before the body did"))
        << f.result.output;
    EXPECT_TRUE(has(f.result.output, server.url() + "shards/train-0000")) << f.result.output;
  }
  {
    test::TinyHttpServer server(shards.files);
    for (int k = 0; k < 20; ++k) server.stall(fmt::format("/shards/train-{:06d}.tar", k));
    auto f = train_from_failing_url("DDPX_HTTP_STALL_S=2", fmt::format(url, server.url()));
    EXPECT_EQ(f.result.exit_code, 1) << f.result.output;
    EXPECT_TRUE(has(f.result.output, ".tar: the transfer stalled (under 1 byte/s for 2 s"))
        << f.result.output;
    EXPECT_TRUE(has(f.result.output, "DDPX_HTTP_STALL_S=SECONDS")) << f.result.output;
    EXPECT_LT(f.seconds, 60) << f.result.output;
  }
}

}  // namespace
}  // namespace ddpx
