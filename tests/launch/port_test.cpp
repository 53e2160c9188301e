// Port choice: a reserved port is free for a worker once the probe is released, and two
// reservations alive at once never share a port.
#include "launch/port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <vector>

namespace ddpx::launch {
namespace {

bool can_bind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as TCPStore does
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST(PortTest, ProbeHoldsThePortUntilReleasedThenAWorkerCanBindIt) {
  PortReservation reservation = PortReservation::pick();
  EXPECT_GE(reservation.port(), 1024);
  EXPECT_FALSE(can_bind(reservation.port())) << "the probe must keep others off the port";
  reservation.release_probe();
  EXPECT_TRUE(can_bind(reservation.port()));
}

TEST(PortTest, LiveReservationsNeverShareAPort) {
  std::vector<PortReservation> held;
  std::set<int> ports;
  for (int i = 0; i < 50; ++i) {
    held.push_back(PortReservation::pick());
    held.back().release_probe();  // only the machine-wide lock keeps the port now
    ports.insert(held.back().port());
  }
  EXPECT_EQ(ports.size(), held.size());
}

}  // namespace
}  // namespace ddpx::launch
