// Downloads from a tiny HTTP server on 127.0.0.1 inside the test (never the internet): a good
// archive, a wrong checksum, a 404, and a connection that stops mid-file.
#include "data/download.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

// Serves `files` by path; a path listed in `truncated` announces its full length but sends
// half and closes the connection. Anything else is a 404.
class TinyHttpServer {
 public:
  TinyHttpServer(std::map<std::string, std::string> files, std::set<std::string> truncated = {})
      : files_(std::move(files)), truncated_(std::move(truncated)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~TinyHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/", port_); }

 private:
  void serve() {
    while (!stop_) {
      int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(client, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, n);
      }
      std::string path = request.substr(4, request.find(' ', 4) - 4);  // "GET /path HTTP/1.1"
      auto it = files_.find(path);
      std::string response;
      if (it == files_.end()) {
        response = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      } else {
        const std::string& body = it->second;
        response = fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                               body.size());
        response += truncated_.count(path) ? body.substr(0, body.size() / 2) : body;
      }
      ::send(client, response.data(), response.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }

  std::map<std::string, std::string> files_;
  std::set<std::string> truncated_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

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
