#include "launch/port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"

namespace ddpx::launch {
namespace {

constexpr int kLowestPort = 20000;  // below: well-known services people run by hand
constexpr int kMaxAttempts = 500;

// The kernel's ephemeral range (outgoing connections); candidates are drawn below it.
int ephemeral_low() {
  int low = 32768, high = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  return low;
}

// Binds the abstract unix socket that stands for "a ddpx launcher holds this port".
int take_lock(int port) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = "ddpx-port-" + std::to_string(port);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Binds 0.0.0.0:port without SO_REUSEADDR: fails when anything listens on it or on one of
// this machine's addresses at that port.
int probe_tcp(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

PortReservation PortReservation::pick() {
  int high = ephemeral_low() - 1;
  int low = kLowestPort;
  if (high - low < 1000) {  // an unusual ephemeral range: use the ports above it instead
    low = 1024;
    high = 65535;
  }
  std::random_device entropy;
  std::mt19937 rng(entropy() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> draw(low, high);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    int port = draw(rng);
    int lock_fd = take_lock(port);
    if (lock_fd < 0) continue;
    int probe_fd = probe_tcp(port);
    if (probe_fd < 0) {
      ::close(lock_fd);
      continue;
    }
    return PortReservation(port, lock_fd, probe_fd);
  }
  fail(ErrorKind::kIo,
       "ddpx run: found no free TCP port in [{}, {}] after {} tries; pass --master_port", low, high,
       kMaxAttempts);
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : port_(other.port_), lock_fd_(other.lock_fd_), probe_fd_(other.probe_fd_) {
  other.lock_fd_ = -1;
  other.probe_fd_ = -1;
}

PortReservation::~PortReservation() {
  release_probe();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void PortReservation::release_probe() {
  if (probe_fd_ >= 0) ::close(probe_fd_);
  probe_fd_ = -1;
}

}  // namespace ddpx::launch
