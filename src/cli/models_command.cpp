// Placeholder until the models subcommand lands.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace ddpx::cli {
void add_models_command(CLI::App& app, int& exit_code) { app.add_subcommand("models", "(not yet built)"); }
}  // namespace ddpx::cli
