// A tiny HTTP/1.1 server on 127.0.0.1 for tests of downloads and of shards read over HTTP
// (never the internet): serves in-memory files, byte ranges of them (`Range: bytes=A-B`, 206;
// 416 past the end), a 404 for anything else, and can cut a file's connection mid-body or
// stall in it.
#pragma once

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace ddpx::test {

// Serves `files` by path; a path listed in `truncated` announces its full length but sends
// half and closes the connection (every time, or with cut_once only on its first request).
// Anything else is a 404. It listens on `port` (0: one the system picks; see port()). A path
// given to stall() sends half its body and then nothing, holding the connection open until
// the server is destroyed (one client at a time: it serves nothing else meanwhile).
class TinyHttpServer {
 public:
  TinyHttpServer(std::map<std::string, std::string> files, std::set<std::string> truncated = {},
                 bool cut_once = false, int port = 0)
      : files_(std::move(files)), truncated_(std::move(truncated)), cut_once_(cut_once) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
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
  // Answers Range requests with the whole file (200), as Python's http.server does.
  void ignore_ranges() { ranges_ = false; }
  void stall(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    stalled_.insert(path);
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/", port_); }
  int port() const { return port_; }
  // How many times `path` was asked for.
  int requests(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = requests_.find(path);
    return it == requests_.end() ? 0 : it->second;
  }

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
      int earlier = 0;  // requests for this path before this one
      bool stall = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        earlier = requests_[path]++;
        stall = stalled_.count(path) > 0;
      }
      long long first = -1, last = -1;  // a Range request's bytes, inclusive
      {
        std::string lower = request;
        for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const size_t at = lower.find("\r\nrange: bytes=");
        if (at != std::string::npos && ranges_)
          std::sscanf(request.c_str() + at + 15, "%lld-%lld", &first, &last);
      }
      auto it = files_.find(path);
      std::string response;
      if (it == files_.end()) {
        response = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      } else {
        std::string body = it->second;
        std::string status = "200 OK";
        if (first >= 0 && first >= static_cast<long long>(body.size())) {
          status = "416 Range Not Satisfiable";
          body.clear();
        } else if (first >= 0) {
          const long long end = std::min<long long>(last, static_cast<long long>(body.size()) - 1);
          body = body.substr(static_cast<size_t>(first), static_cast<size_t>(end - first + 1));
          status = "206 Partial Content";
        }
        response = fmt::format("HTTP/1.1 {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                               status, body.size());
        const bool cut = truncated_.count(path) && !(cut_once_ && earlier > 0);
        response += cut || stall ? body.substr(0, body.size() / 2) : body;
      }
      if (stall) {
        ::send(client, response.data(), response.size(), MSG_NOSIGNAL);
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ::close(client);
        return;
      }
      ::send(client, response.data(), response.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }

  std::map<std::string, std::string> files_;
  std::set<std::string> truncated_;
  std::set<std::string> stalled_;
  bool cut_once_ = false;
  mutable std::mutex mutex_;
  std::map<std::string, int> requests_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ranges_{true};
  std::thread thread_;
};

}  // namespace ddpx::test
