// One `ddpx serve` per port and per state folder: a second one started beside a running service
// is refused at once with one line naming the first one's pid, instead of starting and answering
// half of the requests (Debian's cpp-httplib binds with SO_REUSEPORT by default).
#include <gtest/gtest.h>

#include <string>

#include "serve/service.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::shell_quote;
using namespace serve_testing;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `ddpx serve` with these flags; a service that starts runs until the time limit (a failure).
test::CommandResult serve(const std::string& state, int port) {
  return test::run_command(test::ddpx_command("serve --state " + shell_quote(state) +
                                              " --listen 127.0.0.1:" + std::to_string(port)),
                           15);
}

TEST(ServeExclusiveTest, ASecondServiceOnAServedPortIsRefusedNamingTheFirst) {
  test::TempDir first_dir, second_dir;
  Service first(first_dir);
  auto second = serve(second_dir.file("state"), first.port());
  EXPECT_FALSE(second.timed_out) << "a second service started on the same port";
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_TRUE(has(second.output, "--listen 127.0.0.1:" + std::to_string(first.port()) + ": port " +
                                     std::to_string(first.port()) + " is already served by pid " +
                                     std::to_string(first.pid())))
      << second.output;
  // The first one still answers every request.
  for (int i = 0; i < 20; ++i) {
    auto r = first.client().Get("/api/v1/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

TEST(ServeExclusiveTest, ASecondServiceOnTheSameStateFolderIsRefusedOnAnyPort) {
  test::TempDir dir;
  Service first(dir);
  auto second = serve(dir.file("state"), test::free_port());
  EXPECT_FALSE(second.timed_out) << "a second service started on the same state folder";
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_TRUE(has(second.output, "--state " + dir.file("state") + ": another `ddpx serve` (pid " +
                                     std::to_string(first.pid()) + ") already serves this folder"))
      << second.output;
  // Once the first one stops, the folder is free again.
  first.kill(SIGTERM);
  first.start();
  auto r = first.client().Get("/api/v1/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace ddpx
