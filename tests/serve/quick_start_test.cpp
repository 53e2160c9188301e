// docs/serve.md's quick start as a user types it: `--state` after the token verb's USER (where
// users put it), and the service's URL given once in $DDPX_SERVER beside $DDPX_TOKEN instead of
// `--server` on every command. And the quick start itself, read from docs/serve.md and run in
// order as printed (TheDocsQuickStartRunsInOrderAsPrinted).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "serve/service.h"
#include "support/doc_commands.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;
using test::shell_quote;
using namespace serve_testing;

TEST(ServeQuickStartTest, StateGoesAfterTheUserAndTheServerComesFromTheEnvironment) {
  test::TempDir dir;
  Service s(dir);
  const std::string state = shell_quote(dir.file("state"));
  // The token made with --state last is one the running service accepts.
  auto add = run_command(test::ddpx_command("serve token add bob --state " + state), 30);
  ASSERT_EQ(add.exit_code, 0) << add.output;
  const std::string token = add.output.substr(0, add.output.find('\n'));
  ASSERT_EQ(token.size(), 64u) << add.output;

  const std::string env =
      "DDPX_TOKEN=" + token + " DDPX_SERVER=http://127.0.0.1:" + std::to_string(s.port()) + " ";
  auto submit =
      run_command(env + test::ddpx_command("submit -n 1 -- sh -c 'echo quick start'"), 30);
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  const std::string id = submit.output.substr(0, submit.output.find('\n'));
  auto logs = run_command(env + test::ddpx_command("logs " + id + " -f"), 60);
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_NE(logs.output.find("quick start"), std::string::npos) << logs.output;
  auto jobs = run_command(env + test::ddpx_command("jobs"), 30);
  EXPECT_NE(jobs.output.find("bob"), std::string::npos) << "the service's table: " << jobs.output;
  // `--server local` is this host again: its own table, which has no column of users' states.
  auto local = run_command(env + test::ddpx_command("jobs --server local"), 30);
  EXPECT_EQ(local.exit_code, 0) << local.output;
  EXPECT_EQ(local.output.find("bob"), std::string::npos) << local.output;
  EXPECT_NE(local.output.find("KIND"), std::string::npos) << local.output;
}

TEST(ServeQuickStartTest, WithoutStateTheServiceAndTheTokenVerbSayWhatIsMissing) {
  for (const char* command : {"serve", "serve token add alice"}) {
    auto r = run_command(test::ddpx_command(command), 30);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find("give --state DIR"), std::string::npos) << command << ": " << r.output;
  }
}

// A `ddpx serve` started as a line of the docs prints it, in its own process group.
struct ServeProcess {
  pid_t pid = 0;
  ~ServeProcess() {
    if (pid <= 0) return;
    ::kill(-pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
};

bool port_is_free(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  return !c.Get("/api/v1/health");
}

// docs/serve.md's first block, each `$ ` line run in order as printed, with what a user's own
// machine supplies instead of the docs' examples: the state folder (for /var/lib/ddpx-serve),
// the token `token add` printed (for 3f9c...e1), the snapshot that `--list` showed, a second
// service on this host for other-node, and 127.0.0.1:8470 only while nothing else holds it.
// `logs -f` follows until the user's Ctrl-C (after 4 s here). Each command must exit 0, and the
// first word of what the docs show it printing must be in what it printed. The service runs the
// jobs with DDPX_EPOCHS and DDPX_BATCH_SIZE (train/env_limits.h) so that job 1 still trains when
// the snapshot is asked for; every job is stopped at the end.
TEST(ServeQuickStartTest, TheDocsQuickStartRunsInOrderAsPrinted) {
  const auto lines = docs_testing::block_lines("docs/serve.md", 0);
  ASSERT_GE(lines.size(), 10u) << "docs/serve.md's first block is the quick start";
  test::TempDir dir, other_dir;
  Service other(other_dir, "--slots 2", "DDPX_EPOCHS=1000 DDPX_BATCH_SIZE=2");
  const std::string other_token = other.token("alice");
  const int port = port_is_free(8470) ? 8470 : test::free_port();
  ServeProcess service;
  std::map<std::string, std::string> fills = {
      {"/var/lib/ddpx-serve", dir.file("state")},
      {"http://other-node:8470", "http://127.0.0.1:" + std::to_string(other.port())},
      {"127.0.0.1:8470", "127.0.0.1:" + std::to_string(port)},
  };
  auto fill = [&fills](std::string text) {
    for (const auto& [from, to] : fills) {
      for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + 1))
        text.replace(at, from.size(), to);
    }
    return text;
  };
  std::string env;  // the `export`ed variables, as `A=B C=D `
  std::string last_output;
  int ran = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("$ ", 0) != 0) continue;
    const std::string printed = docs_testing::without_comment(lines[i].substr(2));
    // What the docs show it printing: the first word of the next line, unless it is a command.
    std::string shown;
    if (i + 1 < lines.size() && lines[i + 1].rfind("$ ", 0) != 0)
      std::istringstream(lines[i + 1]) >> shown;
    SCOPED_TRACE("docs/serve.md quick start: " + printed);
    const std::string text = fill(printed);
    if (text.rfind("export ", 0) == 0) {
      env += text.substr(7) + " ";
      continue;
    }
    ASSERT_EQ(text.rfind("ddpx ", 0), 0u) << "the quick start has only ddpx and export lines";
    test::CommandResult r;
    if (std::regex_search(text, std::regex(R"(^ddpx serve --state \S+$)"))) {
      // The service runs until it is stopped: started, then asked whether it is up.
      const std::string log = dir.file("serve.log");
      service.pid = ::fork();
      if (service.pid == 0) {
        ::setpgid(0, 0);
        std::string line = "DDPX_EPOCHS=1000 DDPX_BATCH_SIZE=2 exec " +
                           test::ddpx_command(text.substr(5)) +
                           (port == 8470 ? "" : " --listen 127.0.0.1:" + std::to_string(port)) +
                           " > " + test::shell_quote(log) + " 2>&1";
        ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      for (int k = 0; k < 100 && port_is_free(port); ++k) ::usleep(100 * 1000);
      r.exit_code = port_is_free(port) ? 1 : 0;
      r.output = test::run_command("cat " + test::shell_quote(log)).output;
    } else if (text.find(" -f") != std::string::npos) {
      r = run_command(env + "timeout -s INT 4 " + test::ddpx_command(text.substr(5)), 30);
      EXPECT_EQ(r.exit_code, 124) << "followed the log until the Ctrl-C:\n" << r.output;
      r.exit_code = 0;
    } else if (text.find("--list") != std::string::npos) {
      // The snapshot asked for just before is written at the job's next agreed step.
      for (int k = 0; k < 300; ++k) {
        r = run_command(env + test::ddpx_command(text.substr(5)), 30);
        if (r.output.find("_step") != std::string::npos) break;
        ::usleep(100 * 1000);
      }
      std::smatch m;
      ASSERT_TRUE(
          std::regex_search(r.output, m, std::regex(R"(checkpoint_epoch\d+_step\d+\.ddpx)")))
          << r.output;
      fills["checkpoint_epoch0001_step000420.ddpx"] = m.str();
    } else {
      // `restore` to the other service is alice's there: her token on that service.
      const std::string who = text.find(fills["http://other-node:8470"]) != std::string::npos
                                  ? env + "DDPX_TOKEN=" + other_token + " "
                                  : env;
      r = run_command(who + test::ddpx_command(text.substr(5)), 60);
    }
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (text.find("token add alice") != std::string::npos) {
      const std::string token = r.output.substr(0, r.output.find('\n'));
      EXPECT_EQ(token.size(), 64u) << r.output;
      fills["3f9c...e1"] = token;
    }
    if (!shown.empty())
      EXPECT_NE(r.output.find(fill(shown)), std::string::npos)
          << "the docs show `" << fill(shown) << "` first:\n"
          << r.output;
    if (text == "ddpx jobs") EXPECT_NE(r.output.find("alice"), std::string::npos) << r.output;
    last_output = r.output;
    ++ran;
  }
  EXPECT_GE(ran, 12);
  // No job left running: every job of both services is stopped.
  for (const std::string& server :
       {"http://127.0.0.1:" + std::to_string(port), fills["http://other-node:8470"]}) {
    const std::string token =
        server == fills["http://other-node:8470"] ? other_token : fills["3f9c...e1"];
    for (int id = 1; id <= 3; ++id)
      run_command("DDPX_TOKEN=" + token + " " +
                      test::ddpx_command("stop " + std::to_string(id) + " --server " + server),
                  60);
  }
}

}  // namespace
}  // namespace ddpx
