// `ddpx shell N`: the interactive mode without SSH. Reserves N workers' devices (GPUs on a GPU
// host; nothing on a CPU host) and a port host-wide (reservation.h, port.h), then runs the
// user's shell (or the given command) on this terminal with the job's environment:
//   DDPX_JOB                         the reservation's id (`ddpx run` inside uses its port)
//   CUDA_VISIBLE_DEVICES / HIP_...   the reserved GPUs, when there are any
//   MASTER_ADDR, MASTER_PORT         127.0.0.1 and the reserved port
//   PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE   torchrun's defaults from the same
// The reservation ends when the shell does. Nothing listens on the network.
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

struct ShellOptions {
  int workers = 1;
  std::string gpus;                  // as `ddpx run --gpus`: empty (free ones), "none" or a list
  std::vector<std::string> command;  // empty: $SHELL (or /bin/sh)
};

// Returns the shell's exit code.
int run_shell(const ShellOptions& options);

}  // namespace ddpx::launch
