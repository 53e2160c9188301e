// The launcher's signals as bytes on a pipe: SIGINT/SIGTERM/SIGHUP/SIGCHLD and the snapshot
// requests SIGUSR1/SIGUSR2 are written, one byte each, to a pipe the watch loop polls beside the
// workers' output (a handler may run on any thread, so the loop, not the handler, does the
// work). SIGPIPE is ignored meanwhile: a closed console must not kill the job. The destructor
// restores the old handlers.
#pragma once

#include <signal.h>

namespace ddpx::launch {

class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  int fd() const;  // non-blocking read end

 private:
  static constexpr int kCount = 6;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2};
  struct sigaction old_[kCount] {};
  struct sigaction old_pipe_ {};
};

}  // namespace ddpx::launch
