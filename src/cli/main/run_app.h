// Parsing the command line and turning what a command throws into one line and an exit code,
// shared by both executables (main.cpp, front.cpp): 0 success, 1 failure, 2 bad usage. A flag
// given twice takes its last value, as in argparse.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "cli/help_format.h"
#include "core/error.h"
#include "core/log.h"

namespace ddpx::cli {

// Thrown once the command line is parsed and checked, when DDPX_PARSE_ONLY is set (parse_only).
struct ParseOnlyDone {};

// DDPX_PARSE_ONLY=1: parse and check the command line as usual (flags, values, required
// arguments), then exit 0 without running it. DDPX_PARSE_ONLY=lines (ddpx-torch, main.cpp): the
// same for every line of stdin, in one process. tests/e2e/docs_commands_test.cpp checks every
// example command of the README and docs/ this way.
inline bool parse_only() {
  const char* only = std::getenv("DDPX_PARSE_ONLY");
  return only && (std::string(only) == "1" || std::string(only) == "lines");
}

// Every single-value flag of `app` and of every subcommand under it takes its last value when
// given twice, as argparse, torchrun and timm do: users append overrides to a fixed command line
// (`ddpx run 2 -- train --recipe fashion-mnist-demo ... --num_epochs 5`, a wrapper script's
// "$BASE --lr 0.1"). CLI11's default refuses the second value. Set here, once every subcommand
// exists, rather than through the root's option_defaults(), which reach only the subcommands and
// options made after them. List-valued flags (`--shard_units a,b --shard_units c`) and the program
// after `--` keep every value; so do positional arguments.
inline void take_last_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (!option->get_positional() &&
        option->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw &&
        option->get_items_expected_max() == 1)
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) take_last_values(*sub);
}

// `describe` turns an exception that is neither CLI11's nor ddpx's into its message (main.cpp
// strips libtorch's backtraces); by default what().
inline int run_app(CLI::App& app, int argc, char** argv, const int& exit_code,
                   const std::function<std::string(const std::exception&)>& describe = {}) {
  auto prefix = [] {
    return log::rank() > 0 ? "ddpx: error [rank " + std::to_string(log::rank()) + "]: "
                           : std::string("ddpx: error: ");
  };
  use_help_formatter(app);
  take_last_values(app);
  // The root's parse-complete callback runs after the checks and before any subcommand's.
  if (parse_only()) app.parse_complete_callback([] { throw ParseOnlyDone{}; });
  if (argc <= 1) {
    std::fputs(app.help().c_str(), stdout);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const ParseOnlyDone&) {
    return 0;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s%s (see --help)\n", prefix().c_str(), e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s%s\n", prefix().c_str(), e.what());
    return e.kind() == ErrorKind::kUsage ? 2 : 1;
  } catch (const std::exception& e) {
    std::string message = describe ? describe(e) : std::string(e.what());
    std::fprintf(stderr, "%s%s\n", prefix().c_str(), message.c_str());
    return 1;
  }
  return exit_code;
}

}  // namespace ddpx::cli
