// `ddpx jobs`, `ddpx logs`, `ddpx stop` and `ddpx shell`: this host's jobs and reservations
// (src/launch/job_control.h, shell.h). Torch-free: the `ddpx` front runs them itself.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "launch/job_control.h"
#include "launch/shell.h"

namespace ddpx::cli {
namespace {

void add_jobs(CLI::App& app, int& exit_code) {
  auto all = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  CLI::App* jobs = app.add_subcommand(
      "jobs", "List this host's ddpx jobs and shells: id, user, pid, devices, port, start, logs");
  jobs->add_flag("--all", *all, "Also jobs that ended (kept a week) or were killed (lost)");
  jobs->add_flag("--json", *json, "A JSON array instead of the table");
  jobs->callback([all, json, &exit_code] {
    std::string dir = launch::jobs_dir(/*for_writing=*/false);
    auto list = *all ? launch::read_jobs(dir) : launch::live_jobs(dir);
    std::string text = *json ? launch::jobs_json(list) : launch::format_jobs(list);
    std::fputs(text.c_str(), stdout);
    exit_code = 0;
  });
}

void add_logs(CLI::App& app, int& exit_code) {
  auto id = std::make_shared<std::string>();
  auto rank = std::make_shared<int>(0);
  auto follow = std::make_shared<bool>(false);
  CLI::App* logs = app.add_subcommand("logs", "Print a job's log (rank 0's unless --rank)");
  logs->add_option("JOB", *id, "The job id (`ddpx jobs`)")->required();
  logs->add_option("--rank", *rank, "Whose log: a global rank on this host")->capture_default_str();
  logs->add_flag("-f,--follow", *follow, "Keep printing new lines until the job ends");
  logs->callback([id, rank, follow, &exit_code] {
    launch::show_logs(*id, *rank, *follow);
    exit_code = 0;
  });
}

void add_stop(CLI::App& app, int& exit_code) {
  auto id = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(60);
  CLI::App* stop = app.add_subcommand(
      "stop", "Stop a job cleanly: SIGTERM to its launcher, which stops the workers");
  stop->add_option("JOB", *id, "The job id (`ddpx jobs`)")->required();
  stop->add_option("--timeout_s", *timeout, "How long to wait for the job to end")
      ->capture_default_str();
  stop->callback([id, timeout, &exit_code] {
    int code = launch::stop_job(*id, *timeout);
    std::fprintf(stderr, "ddpx stop: job %s ended (exit code %d)\n", id->c_str(), code);
    exit_code = 0;
  });
}

void add_shell(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<launch::ShellOptions>();
  CLI::App* shell = app.add_subcommand(
      "shell",
      "Reserve N workers' devices and a port on this host and open your shell (or run COMMAND) "
      "with the job's environment; `ddpx run` and torchrun inside use the reservation, which "
      "ends with the shell");
  shell->add_option("N", options->workers, "Workers to reserve for")->required();
  shell->add_option("--gpus", options->gpus,
                    "GPU ids to reserve (e.g. 0,1), or none (default: N free ones)");
  shell->add_option("command", options->command, "COMMAND ARGS... after `--` (default: $SHELL)");
  shell->callback([options, &exit_code] { exit_code = launch::run_shell(*options); });
}

}  // namespace

void add_job_commands(CLI::App& app, int& exit_code) {
  add_jobs(app, exit_code);
  add_logs(app, exit_code);
  add_stop(app, exit_code);
  add_shell(app, exit_code);
}

}  // namespace ddpx::cli
