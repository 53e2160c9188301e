// Placeholder until the run subcommand lands.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace ddpx::cli {
void add_run_command(CLI::App& app, int& exit_code) { app.add_subcommand("run", "(not yet built)"); }
}  // namespace ddpx::cli
