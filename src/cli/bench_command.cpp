// Placeholder until the bench subcommand lands.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace ddpx::cli {
void add_bench_command(CLI::App& app, int& exit_code) { app.add_subcommand("bench", "(not yet built)"); }
}  // namespace ddpx::cli
