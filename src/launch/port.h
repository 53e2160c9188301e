// Choosing the rendezvous port for a single-node job so that jobs started at the same moment
// on one machine never pick the same one.
//
// Why not "bind port 0, read it, close": the kernel hands out ports from the ephemeral range,
// the same range outgoing connections use, and nothing stops a second launcher from being
// given the port the first one just closed. Instead a candidate is drawn at random from below
// the ephemeral range and is taken only when
//   1. this launcher can bind the abstract unix socket "\0ddpx-port-<port>": a machine-wide
//      lock that the kernel drops when the launcher exits (no files left behind), so two ddpx
//      launchers never share a port; and
//   2. a TCP socket can bind 0.0.0.0:<port>, so no other program listens there now.
// The probe socket stays bound until release_probe(), just before the workers start; rank 0's
// TCPStore then binds the port. A program that is not ddpx could still grab the port in that
// gap of milliseconds; the worker then fails to bind and the job fails (or is restarted with
// --max_restarts), with a message naming the port.
#pragma once

#include <string>

namespace ddpx::launch {

class PortReservation {
 public:
  static PortReservation pick();  // throws kIo when no candidate is free
  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&&) = delete;
  PortReservation(const PortReservation&) = delete;
  ~PortReservation();

  int port() const { return port_; }
  void release_probe();  // close the TCP probe so a worker can bind the port; keep the lock

 private:
  PortReservation(int port, int lock_fd, int probe_fd)
      : port_(port), lock_fd_(lock_fd), probe_fd_(probe_fd) {}
  int port_;
  int lock_fd_;
  int probe_fd_;
};

}  // namespace ddpx::launch
