// Placeholder until the train subcommand lands.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace ddpx::cli {
void add_train_command(CLI::App& app, int& exit_code) { app.add_subcommand("train", "(not yet built)"); }
}  // namespace ddpx::cli
