#include "distributed/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"

namespace ddpx::dist {
namespace {

constexpr int kListenBacklog = 4096;  // every rank of a large job connects at once

using AddrInfo = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

AddrInfo resolve(const std::string& host, int port, int socktype, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  DDPX_CHECK(rc == 0 && found != nullptr, ErrorKind::kUsage,
             "MASTER_ADDR={} does not resolve ({}); set it to rank 0's host name or address, "
             "reachable from every node",
             host, ::gai_strerror(rc));
  // IPv4 first: that is what clusters' host names mostly mean, and Gloo's peers must agree.
  AddrInfo all(found, &::freeaddrinfo);
  return all;
}

std::string numeric(const sockaddr* addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  ::getnameinfo(addr, len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
  return text;
}

const addrinfo* prefer_ipv4(const AddrInfo& list) {
  for (const addrinfo* a = list.get(); a; a = a->ai_next) {
    if (a->ai_family == AF_INET) return a;
  }
  return list.get();
}

// One connection attempt, waiting at most `limit` for the answer: nullopt when it was accepted,
// else why not.
std::optional<std::string> try_connect(const addrinfo& a, std::chrono::milliseconds limit) {
  int fd = ::socket(a.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::string(std::strerror(errno));
  int rc = ::connect(fd, a.ai_addr, a.ai_addrlen);
  int error = rc == 0 ? 0 : errno;
  if (error == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(limit.count(), 1)));
    socklen_t len = sizeof(error);
    if (ready <= 0) {
      error = ETIMEDOUT;
    } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
      error = errno;
    }
  }
  ::close(fd);
  if (error == 0) return std::nullopt;
  if (error == ETIMEDOUT) return fmt::format("no answer within {} ms", limit.count());
  return std::string(std::strerror(error));
}

}  // namespace

std::optional<std::string> wait_for_listener(
    const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds report_every,
    const std::function<void(const std::string&)>& waiting) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  AddrInfo list = resolve(host, port, SOCK_STREAM, 0);
  const addrinfo* a = prefer_ipv4(list);
  milliseconds pause(50);
  // The first line only once it has waited report_every: ranks that start before rank 0
  // listens (srun, torchrun) meet a refused port for a moment at every start.
  Clock::time_point reported = Clock::now();
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    auto failure = try_connect(*a, std::clamp(left, milliseconds(1), milliseconds(1000)));
    if (!failure) return std::nullopt;
    const auto now = Clock::now();
    if (now + pause >= deadline) return failure;
    if (now - reported >= report_every) {
      waiting(*failure);
      reported = now;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(1000));
  }
}

std::vector<std::string> host_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    out.push_back(numeric(i->ifa_addr, len));
  }
  ::freeifaddrs(list);
  return out;
}

std::string local_address_towards(const std::string& host) {
  AddrInfo list = resolve(host, 9, SOCK_DGRAM, 0);
  const addrinfo* a = prefer_ipv4(list);
  int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "socket failed: {}", std::strerror(errno));
  sockaddr_storage self{};
  socklen_t len = sizeof(self);
  bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0;
  int saved = errno;
  ::close(fd);
  DDPX_CHECK(ok, ErrorKind::kUsage,
             "no route from this host to MASTER_ADDR={} ({}); check the address, or set "
             "GLOO_SOCKET_IFNAME to the interface that reaches it",
             host, std::strerror(saved));
  return numeric(reinterpret_cast<sockaddr*>(&self), len);
}

int listen_on(const std::string& addr, int port) {
  AddrInfo list = resolve(addr, port, SOCK_STREAM, AI_PASSIVE);
  const addrinfo* a = prefer_ipv4(list);
  int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "socket failed: {}", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
    int saved = errno;
    ::close(fd);
    std::string where = numeric(a->ai_addr, a->ai_addrlen);
    if (saved == EADDRNOTAVAIL) {
      std::string mine;
      for (const std::string& h : host_addresses()) mine += (mine.empty() ? "" : ", ") + h;
      fail(ErrorKind::kUsage,
           "MASTER_ADDR={} ({}) is not an address of this host, where rank 0 hosts the "
           "rendezvous; start rank 0 on that host or set MASTER_ADDR to one of: {}",
           addr, where, mine);
    }
    if (saved == EADDRINUSE) {
      fail(ErrorKind::kDist,
           "rank 0 cannot host the rendezvous: port {} is already in use by another program (a "
           "stale job?) on {}; stop it (ss -ltnp | grep :{} shows who listens) or set "
           "MASTER_PORT to a free port for every rank",
           port, where, port);
    }
    fail(ErrorKind::kDist,
         "rank 0 cannot host the rendezvous on {}:{}: {}; set MASTER_PORT to a free port for "
         "every rank",
         where, port, std::strerror(saved));
  }
  return fd;
}

}  // namespace ddpx::dist
