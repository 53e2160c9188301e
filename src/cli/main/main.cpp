// ddpx: distributed data-parallel training in C++. The only place that turns errors into
// messages and exit codes: 0 success, 1 failure, 2 bad usage.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

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
  ddpx::cli::add_export_command(app, exit_code);
  auto prefix = [] {
    return ddpx::log::rank() > 0 ? "ddpx: error [rank " + std::to_string(ddpx::log::rank()) + "]: "
                                 : std::string("ddpx: error: ");
  };
  if (argc <= 1) {
    std::fputs(app.help().c_str(), stdout);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s%s (see --help)\n", prefix().c_str(), e.what());
    return 2;
  } catch (const ddpx::Error& e) {
    std::fprintf(stderr, "%s%s\n", prefix().c_str(), e.what());
    return e.kind() == ddpx::ErrorKind::kUsage ? 2 : 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s%s\n", prefix().c_str(), e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", prefix().c_str(), e.what());
    return 1;
  }
  return exit_code;
}
