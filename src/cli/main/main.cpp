// ddpx-torch: every ddpx command, with libtorch loaded. Users run `ddpx` (front.cpp), which
// hands every command but `run` to this binary with the same argv.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/main/run_app.h"
#include "core/flight_recorder.h"
#include "core/malloc_tuning.h"
#include "train/snapshot_request.h"

int main(int argc, char** argv) {
  // First: a snapshot request held since `ddpx train` started is taken, not fatal.
  if (argc > 1 && !std::strcmp(argv[1], "train")) ddpx::train::install_snapshot_signals();
  ddpx::tune_malloc();  // before libtorch allocates anything that training frees and re-allocates
  ddpx::disable_flight_recorder();  // before any process group (core/flight_recorder.h)
  // libtorch's own warnings that quote an error (c10d's connection retries) would print its C++
  // backtrace, frames of addresses no user can act on; ddpx's errors say what to do instead.
  // TORCH_SHOW_CPP_STACKTRACES=1, PyTorch's switch for them, keeps them.
  const char* show = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  if (show == nullptr || std::string(show) != "1")
    c10::SetStackTraceFetcher([] { return std::string(); });
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
  ddpx::cli::add_generate_command(app, exit_code);
  ddpx::cli::add_tune_command(app, exit_code);
  ddpx::cli::add_plan_command(app, exit_code);
  ddpx::cli::add_job_commands(app, exit_code);
  ddpx::cli::add_sbatch_command(app, exit_code);
  ddpx::cli::add_container_command(app, exit_code);
  ddpx::cli::add_doctor_command(app, exit_code);
  ddpx::cli::add_serve_command(app, exit_code);
  return ddpx::cli::run_app(app, argc, argv, exit_code, [](const std::exception& e) {
    const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
    return torch_error ? std::string(torch_error->what_without_backtrace()) : std::string(e.what());
  });
}
