// Runs a short-lived program to completion and captures what it prints (stdout and stderr
// together): for the cluster tools ddpx asks (sbatch, scontrol, scancel). posix_spawn, not
// popen: no shell in between, none of the caller's descriptors in the child, and the child is
// waited for by its pid, so a service whose other threads start and reap processes is safe.
#pragma once

#include <string>
#include <vector>

namespace ddpx {

struct ProgramOutput {
  int exit_code = 0;   // 128+N when signal N ended it; 127 when it could not start
  std::string output;  // stdout and stderr, interleaved as written
};

// argv[0] is looked up on PATH. A program still running after timeout_s is killed (exit 137).
ProgramOutput run_program(const std::vector<std::string>& argv, int timeout_s = 30);

}  // namespace ddpx
