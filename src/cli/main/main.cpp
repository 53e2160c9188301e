// ddpx-torch: every ddpx command, with libtorch loaded. Users run `ddpx` (front.cpp), which
// hands every command but `run` to this binary with the same argv.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <wordexp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/main/front_app.h"
#include "cli/main/run_app.h"
#include "core/flight_recorder.h"
#include "core/malloc_tuning.h"
#include "train/snapshot_request.h"

namespace {

// Every command, in `ddpx --help`'s order.
void add_commands(CLI::App& app, int& exit_code) {
  app.set_version_flag("--version", "ddpx 0.1.0");
  app.require_subcommand(1);
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
}

std::string describe(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error ? std::string(torch_error->what_without_backtrace()) : std::string(e.what());
}

// DDPX_PARSE_ONLY=lines: every line of stdin is a command line, `ddpx ARGS`, split into words as
// sh splits them (quotes, $VAR, ~; a command substitution is refused) and checked as
// DDPX_PARSE_ONLY=1 checks one, by the app that a real `ddpx ARGS` parses it with (the front's for
// its commands: front.cpp). What the check prints (an error, --help) comes first, then
// "ddpx parse-only: exit N" on a line of its own. libtorch loads once for every line: the docs
// test checks ~100 command lines in one process rather than ~0.9 CPU-s each.
int parse_lines() {
  for (std::string line; std::getline(std::cin, line);) {
    int code = 2;
    wordexp_t words{};
    const int split = ::wordexp(line.c_str(), &words, WRDE_NOCMD);
    if (split != 0) {
      std::fprintf(stderr,
                   "ddpx: error: cannot split the line into words as sh would (wordexp "
                   "error %d): %s\n",
                   split, line.c_str());
    } else {
      const int argc = static_cast<int>(words.we_wordc);
      char** argv = words.we_wordv;
      CLI::App app{ddpx::cli::kAppDescription};
      int exit_code = 0;
      if (argc > 1 && ddpx::cli::is_front_command(argv[1]))
        ddpx::cli::add_front_commands(app, exit_code);
      else
        add_commands(app, exit_code);
      code = ddpx::cli::run_app(app, argc, argv, exit_code, describe);
    }
    if (split == 0 || split == WRDE_NOSPACE) ::wordfree(&words);
    std::cout.flush();
    std::printf("ddpx parse-only: exit %d\n", code);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

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
  if (const char* only = std::getenv("DDPX_PARSE_ONLY"); only && std::string(only) == "lines")
    return parse_lines();
  CLI::App app{ddpx::cli::kAppDescription};
  int exit_code = 0;
  add_commands(app, exit_code);
  return ddpx::cli::run_app(app, argc, argv, exit_code, describe);
}
