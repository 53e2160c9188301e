// The sockets a multi-node job opens itself (distributed/net.h): rank 0's rendezvous listens on
// MASTER_ADDR only, and an address this host does not have is refused with the ones it has.
#include "distributed/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include "support/support.h"

namespace ddpx::dist {
namespace {

TEST(NetTest, RendezvousListensOnTheMasterAddressOnly) {
  int port = test::free_port();
  int fd = listen_on("127.0.0.1", port);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len), 0);
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &bound.sin_addr, text, sizeof(text));
  EXPECT_STREQ(text, "127.0.0.1") << "not 0.0.0.0";
  EXPECT_EQ(ntohs(bound.sin_port), port);
  ::close(fd);
}

TEST(NetTest, AnAddressOfAnotherHostOrNoneIsOneClearLine) {
  std::string other = test::usage_error([] { listen_on("192.0.2.77", test::free_port()); });
  EXPECT_NE(other.find("MASTER_ADDR=192.0.2.77 (192.0.2.77) is not an address of this host"),
            std::string::npos)
      << other;
  EXPECT_NE(other.find("127.0.0.1"), std::string::npos) << "lists this host's addresses";
  std::string none = test::usage_error([] { local_address_towards("no.such.host.invalid"); });
  EXPECT_NE(none.find("MASTER_ADDR=no.such.host.invalid does not resolve"), std::string::npos)
      << none;
  EXPECT_EQ(local_address_towards("127.0.0.1"), "127.0.0.1");
}

}  // namespace
}  // namespace ddpx::dist
