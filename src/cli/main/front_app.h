// The command line of the torch-free `ddpx` front (front.cpp): the commands it runs itself
// (kFrontCommandNames). Shared with ddpx-torch's DDPX_PARSE_ONLY=lines (main.cpp), which checks
// each of those lines with the app that a real invocation of it would parse it with.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/commands.h"

namespace ddpx::cli {

inline constexpr const char* kAppDescription =
    "ddpx: distributed data-parallel deep-learning training in C++ (libtorch + c10d)";

// Whether `ddpx ARGV1 ...` runs in the front rather than in ddpx-torch.
inline bool is_front_command(const char* argv1) {
  for (const char* name : kFrontCommandNames)
    if (std::string(argv1) == name) return true;
  return false;
}

inline void add_front_commands(CLI::App& app, int& exit_code) {
  app.require_subcommand(1);
  add_run_command(app, exit_code);
  add_job_commands(app, exit_code);
  add_sbatch_command(app, exit_code);
  add_container_command(app, exit_code);
  add_serve_command(app, exit_code);
}

}  // namespace ddpx::cli
