// A `ddpx serve` for the tests: its own process on a free loopback port with a fresh state
// folder, tokens made with `ddpx serve token add`, and the JSON calls most tests make.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/support.h"

namespace ddpx::serve_testing {

using nlohmann::json;

class Service {
 public:
  // `env`: variables for the service (e.g. "PATH=/nonexistent"), prefixed to its command.
  explicit Service(const test::TempDir& dir, const std::string& flags = "--slots 2",
                   const std::string& env = "")
      : dir_(dir), flags_(flags), env_(env) {
    start();
  }
  ~Service() { kill(SIGTERM); }

  void start() {
    // The service refuses an oversized body from its Content-Length, before reading it, and
    // closes the connection: a client still sending must see EPIPE, not die of SIGPIPE.
    ::signal(SIGPIPE, SIG_IGN);
    port_ = test::free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::string log = dir_.file("serve.log");
      std::string cmd =
          test::ddpx_command("serve --state " + test::shell_quote(dir_.file("state")) +
                             " --listen 127.0.0.1:" + std::to_string(port_) + " " + flags_) +
          " >> " + test::shell_quote(log) + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", ("exec env " + env_ + " " + cmd).c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100; ++i) {
      auto r = client().Get("/api/v1/health");
      if (r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the service did not come up: "
                  << test::run_command("cat " + test::shell_quote(dir_.file("serve.log"))).output;
  }
  void kill(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }
  std::string token(const std::string& user, bool admin = false) {
    auto r = test::run_command(
        test::ddpx_command("serve --state " + test::shell_quote(dir_.file("state")) +
                           " token add " + user + (admin ? " --admin" : "")),
        30);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output.substr(0, r.output.find('\n'));
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // the service (sh execs it)

  // How many of the service's children are zombies (ended, never waited for).
  int zombie_children() const {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;  // not a process
      std::ifstream in(entry.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), {});
      size_t close = stat.rfind(')');  // after "pid (comm)": state, ppid
      if (close == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == pid_ &&
          state == 'Z')
        ++count;
    }
    return count;
  }

 private:
  const test::TempDir& dir_;
  std::string flags_;
  std::string env_;
  int port_ = 0;
  pid_t pid_ = 0;
};

inline httplib::Headers auth(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

inline json submit(Service& s, const std::string& token, const json& body, int expect = 201) {
  auto r = s.client().Post("/api/v1/jobs", auth(token), body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return json();
  EXPECT_EQ(r->status, expect) << r->body;
  return json::parse(r->body, nullptr, false);
}

inline json get_job(Service& s, const std::string& token, int64_t id) {
  auto r = s.client().Get("/api/v1/jobs/" + std::to_string(id), auth(token));
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r ? json::parse(r->body, nullptr, false) : json();
}

inline json wait_ended(Service& s, const std::string& token, int64_t id, int seconds = 120) {
  for (int i = 0; i < seconds * 5; ++i) {
    json j = get_job(s, token, id);
    if (j.is_object() && j["state"] == "ended") return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ADD_FAILURE() << "job " << id << " did not end";
  return json();
}

}  // namespace ddpx::serve_testing
