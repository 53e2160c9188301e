// ddpx: the command users run. It starts without libtorch, whose loading costs CPU time in
// every process (PyTorch's wheel: about 1.6 GB of libtorch_cpu and libtorch_cuda with their
// CUDA libraries). `ddpx run` (the launcher) and the host's job commands (jobs, logs, stop,
// shell, sbatch, container,
// serve: kFrontCommandNames) need none of it, so they run here and only the
// workers pay for libtorch; every other command is handed, argv unchanged, to ddpx-torch next to
// this binary (execv keeps the pid, so signals and process trees are unaffected).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/main/front_app.h"
#include "cli/main/run_app.h"

namespace {

constexpr const char* kTorchBinary = "ddpx-torch";

// ddpx-torch beside this executable (build/src/ or an install's bin/).
std::string torch_binary_path() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return kTorchBinary;
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + kTorchBinary;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && ddpx::cli::is_front_command(argv[1])) {
    CLI::App app{ddpx::cli::kAppDescription};
    int exit_code = 0;
    ddpx::cli::add_front_commands(app, exit_code);
    return ddpx::cli::run_app(app, argc, argv, exit_code);
  }
  if (argc > 1 && !std::strcmp(argv[1], "train")) {
    // Snapshot requests (SIGUSR1/SIGUSR2) that come while ddpx-torch loads libtorch stay
    // pending across execv until it installs their handlers (train/snapshot_request.h).
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGUSR1);
    sigaddset(&held, SIGUSR2);
    ::sigprocmask(SIG_BLOCK, &held, nullptr);
  }
  std::string torch = torch_binary_path();
  ::execv(torch.c_str(), argv);
  std::fprintf(stderr,
               "ddpx: error: cannot start %s: %s; rebuild with scripts/build (it builds "
               "both ddpx and %s into the same folder)\n",
               torch.c_str(), std::strerror(errno), kTorchBinary);
  return 1;
}
