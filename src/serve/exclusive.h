// One `ddpx serve` per state folder and per port. Two services over one folder (or two over two
// folders on one port, which the kernel lets share with SO_REUSEPORT) answer at random and each
// schedules from its own view of the queue: records get lost. So the service holds an exclusive
// lock on STATE/ddpx-serve.lock (its pid written inside) for as long as it runs, and binds its
// port without SO_REUSEPORT; a second one is refused with one line naming the first's pid.
#pragma once

#include <string>

namespace ddpx::serve {

// The lock on a state folder, held from construction until destruction (or until the process
// ends, however it ends: the kernel drops a flock with its last descriptor).
class StateLock {
 public:
  // Throws kUsage naming the holder's pid when another service holds the folder.
  explicit StateLock(const std::string& state_dir);
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  int fd_ = -1;
};

// "pid N (COMMAND)" of the process listening on TCP `port` of this host, as far as /proc shows it
// (another user's sockets are hidden without privileges); empty when none is found.
std::string port_listener(int port);

// For httplib::Server::set_socket_options: SO_REUSEADDR (a restart may bind while old
// connections linger in TIME_WAIT) but not the library's default SO_REUSEPORT, so a port another
// process listens on is refused (EADDRINUSE) instead of shared.
void exclusive_socket_options(int fd);

}  // namespace ddpx::serve
