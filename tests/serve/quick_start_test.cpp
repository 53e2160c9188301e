// docs/serve.md's quick start as a user types it: `--state` after the token verb's USER (where
// users put it), and the service's URL given once in $DDPX_SERVER beside $DDPX_TOKEN instead of
// `--server` on every command.
#include <gtest/gtest.h>

#include "serve/service.h"
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

}  // namespace
}  // namespace ddpx
