#include "launch/signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ddpx::launch {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  DDPX_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, ErrorKind::kIo, "pipe failed: {}",
             std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &action, &old_[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalPipe::~SignalPipe() {
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

int SignalPipe::fd() const { return g_signal_pipe[0]; }

}  // namespace ddpx::launch
