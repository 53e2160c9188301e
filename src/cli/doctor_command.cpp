// `ddpx doctor [--json]`: what a user needs to know before training (src/doctor/), each finding
// with a verdict and a fix. Exit code 1 when a finding fails, so it serves as a container's
// health check.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "doctor/checks.h"

namespace ddpx::cli {

void add_doctor_command(CLI::App& app, int& exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Check this host before training: versions and build, GPUs (driver, memory, use, "
      "processes, topology, MI300X partitions), NCCL/RCCL, CPU, NUMA, /dev/shm, other jobs");
  cmd->add_flag("--json", *json, "Print the findings as JSON");
  cmd->callback([json, &exit_code] {
    doctor::Report report = doctor::run_doctor();
    std::string text = *json ? doctor::report_json(report) : doctor::format_report(report);
    std::fputs(text.c_str(), stdout);
    exit_code = report.exit_code();
  });
}

}  // namespace ddpx::cli
