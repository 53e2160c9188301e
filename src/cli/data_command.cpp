// Placeholder until the data subcommand lands.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace ddpx::cli {
void add_data_command(CLI::App& app, int& exit_code) { app.add_subcommand("data", "(not yet built)"); }
}  // namespace ddpx::cli
