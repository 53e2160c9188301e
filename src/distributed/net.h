// The sockets a multi-node job opens itself instead of leaving the choice to libtorch:
//   - rank 0's rendezvous listens on MASTER_ADDR only (libtorch's TCPStore server would bind
//     every interface), so nothing of the job is reachable through the host's other addresses;
//   - Gloo binds the address this host uses to reach MASTER_ADDR when GLOO_SOCKET_IFNAME is not
//     set, not the address the host name resolves to (Debian maps it to 127.0.1.1, which the
//     other nodes cannot reach).
// Errors name MASTER_ADDR and what to set.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddpx::dist {

// This host's source address on the route to `host` (UDP connect + getsockname; nothing is
// sent). Throws kUsage when `host` does not resolve.
std::string local_address_towards(const std::string& host);

// A listening TCP socket on addr:port (close-on-exec). Throws kUsage when addr is not an
// address of this host (listing the ones it has) and kDist when the port is taken.
int listen_on(const std::string& addr, int port);

// This host's addresses, e.g. {"127.0.0.1", "10.231.7.1"}.
std::vector<std::string> host_addresses();

// Tries to open a TCP connection to host:port (and closes it) until one succeeds or `deadline`
// passes, with pauses growing from 50 ms to 1 s between tries. Returns nullopt once something
// accepts, else the last failure ("Connection refused", "no answer within 1000 ms"). `waiting` is
// called with that failure once it has waited `report_every`, and then at most that often (a
// port refused for a moment, while rank 0 starts, says nothing).
// Why: libtorch's TCPStore client retries on its own, printing a warning with a 10-frame C++
// backtrace per retry, for as long as the timeout (30 minutes by default); a rank that finds
// the port open first connects at once and prints nothing.
std::optional<std::string> wait_for_listener(
    const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds report_every, const std::function<void(const std::string&)>& waiting);

}  // namespace ddpx::dist
