// ddpx: distributed data-parallel training in C++.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ddpx: distributed data-parallel deep-learning training in C++ (libtorch + c10d)"};
  app.set_version_flag("--version", "ddpx 0.1.0");
  app.require_subcommand(1);
  int exit_code = 0;
  ddpx::cli::add_train_command(app, exit_code);
  ddpx::cli::add_run_command(app, exit_code);
  ddpx::cli::add_data_command(app, exit_code);
  ddpx::cli::add_models_command(app, exit_code);
  ddpx::cli::add_bench_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ddpx::Error& e) {
    std::fprintf(stderr, "ddpx: error: %s\n", e.what());
    return e.kind() == ddpx::ErrorKind::kUsage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpx: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
