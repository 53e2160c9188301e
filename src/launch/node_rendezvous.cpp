// Node ranks at rendezvous (see node_rendezvous.h).
#include "launch/node_rendezvous.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ddpx::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kHello[] = "ddpx-node-rendezvous 1";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// The resolved addresses of addr:port (throws kUsage when it does not resolve).
struct Addresses {
  addrinfo* list = nullptr;
  ~Addresses() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const std::string& addr, int port, Addresses& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &out.list);
  DDPX_CHECK(rc == 0 && out.list, ErrorKind::kUsage,
             "--master_addr {} does not resolve ({}); give node 0's address or host name, "
             "reachable from every node",
             addr, ::gai_strerror(rc));
}

// A listening socket on addr:port when this host owns the address and the port is free.
Fd try_listen(const Addresses& addresses) {
  for (addrinfo* a = addresses.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 64) == 0) return fd;
  }
  return Fd();
}

// A connection to addr:port within timeout_s (an address nobody answers drops SYNs for
// minutes), back in blocking mode.
Fd try_connect(const Addresses& addresses, double timeout_s) {
  for (addrinfo* a = addresses.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) continue;
      pollfd p{fd.get(), POLLOUT, 0};
      int error = 0;
      socklen_t size = sizeof(error);
      if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1 ||
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error != 0)
        continue;
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  return Fd();
}

void send_line(int fd, const std::string& line) {
  std::string text = line + "\n";
  for (size_t sent = 0; sent < text.size();) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the peer went away: it learns nothing more from us
    sent += static_cast<size_t>(n);
  }
}

// One line from fd, waiting at most timeout_s; "" on timeout or a closed connection.
std::string read_line(int fd, double timeout_s) {
  std::string line;
  auto start = Clock::now();
  while (line.size() < 4096) {
    double left = timeout_s - seconds_since(start);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return "";
    char c;
    if (::recv(fd, &c, 1, 0) != 1) return "";
    if (c == '\n') return line;
    line += c;
  }
  return "";
}

int field(const std::string& line, const std::string& key) {
  size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  return std::atoi(line.c_str() + at + key.size() + 2);
}

std::string nodes_text(int nnodes) { return nnodes == 0 ? "auto" : std::to_string(nnodes); }

struct Joiner {
  Fd fd;
  std::string host;
};

// Node 0: admits nodes until the job forms, then tells each its rank.
NodeAssignment hold(Fd listener, const NodeRendezvousOptions& o) {
  const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);
  std::vector<Joiner> joined;
  auto start = Clock::now(), last_join = start;
  auto formed = [&] {
    int nodes = static_cast<int>(joined.size()) + 1;
    if (o.nnodes > 0) return nodes == o.nnodes;
    return nodes >= 2 && seconds_since(last_join) >= o.last_call_s;
  };
  while (!formed()) {
    double left = o.timeout_s - seconds_since(start);
    if (left <= 0) {
      std::string message = fmt::format(
          "the node rendezvous at {} formed no job in {:.0f} s (--rdzv_timeout): {} of {} "
          "node(s) joined; start the same command on every node, or give --nnodes and "
          "--node_rank by hand",
          where, o.timeout_s, joined.size() + 1,
          o.nnodes == 0 ? "at least 2" : nodes_text(o.nnodes));
      for (auto& j : joined) send_line(j.fd.get(), "error " + message);
      fail(ErrorKind::kDist, "{}", message);
    }
    pollfd p{listener.get(), POLLIN, 0};
    double wait = std::min(left, o.nnodes == 0 ? 0.2 : 1.0);
    if (::poll(&p, 1, static_cast<int>(wait * 1000) + 1) <= 0) continue;
    Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.get() < 0) continue;
    std::string hello = read_line(fd.get(), 10);
    if (hello.rfind(kHello, 0) != 0) continue;  // not a ddpx launcher: drop it
    int nnodes = field(hello, "nnodes"), nproc = field(hello, "nproc");
    size_t host_at = hello.find(" host=");
    std::string host = host_at == std::string::npos ? "?" : hello.substr(host_at + 6);
    std::string refusal;
    if (nnodes != o.nnodes) {
      refusal = fmt::format("--nnodes {} on {} but {} on node 0 ({}); give every node the same",
                            nodes_text(nnodes), host, nodes_text(o.nnodes), hostname());
    } else if (nproc != o.nproc_per_node) {
      refusal = fmt::format(
          "{} worker(s) per node on {} but {} on node 0 ({}); give every node the same NPROC",
          nproc, host, o.nproc_per_node, hostname());
    }
    if (!refusal.empty()) {
      send_line(fd.get(), "error " + refusal);
      continue;
    }
    joined.push_back(Joiner{std::move(fd), host});
    last_join = Clock::now();
  }
  const int nnodes = static_cast<int>(joined.size()) + 1;
  for (size_t i = 0; i < joined.size(); ++i)
    send_line(joined[i].fd.get(), fmt::format("rank {} nnodes {}", i + 1, nnodes));
  // Let the joiners close first (their side keeps TIME_WAIT), so the workers' TCPStore binds
  // the port at once.
  for (auto& j : joined) read_line(j.fd.get(), 5);
  return NodeAssignment{0, nnodes};
}

// Any other node: joins node 0's rendezvous, retrying until it answers.
NodeAssignment join(const Addresses& addresses, const NodeRendezvousOptions& o) {
  const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);
  auto start = Clock::now();
  while (true) {
    Fd fd = try_connect(addresses, std::clamp(o.timeout_s - seconds_since(start), 0.1, 5.0));
    if (fd.get() >= 0) {
      send_line(fd.get(), fmt::format("{} nnodes={} nproc={} host={}", kHello, o.nnodes,
                                      o.nproc_per_node, hostname()));
      std::string reply = read_line(fd.get(), o.timeout_s + 30);
      if (reply.rfind("rank ", 0) == 0) {
        NodeAssignment a;
        if (std::sscanf(reply.c_str(), "rank %d nnodes %d", &a.node_rank, &a.nnodes) == 2) return a;
      }
      if (reply.rfind("error ", 0) == 0) fail(ErrorKind::kUsage, "{}", reply.substr(6));
      fail(ErrorKind::kDist,
           "{} accepted this node but did not answer as ddpx's node rendezvous (a job that "
           "already formed holds the port, or another program does); start every node's "
           "command together, or give --node_rank by hand",
           where);
    }
    DDPX_CHECK(seconds_since(start) < o.timeout_s, ErrorKind::kDist,
               "no node rendezvous at {} after {:.0f} s (--rdzv_timeout): is the same command "
               "running on the host of --master_addr {}, and the port open?",
               where, o.timeout_s, o.master_addr);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

NodeAssignment join_node_rendezvous(const NodeRendezvousOptions& options) {
  Addresses addresses;
  resolve(options.master_addr, options.master_port, addresses);
  Fd listener = try_listen(addresses);
  if (listener.get() >= 0) return hold(std::move(listener), options);
  return join(addresses, options);
}

}  // namespace ddpx::launch
