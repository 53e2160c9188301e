// `ddpx serve --state DIR [--listen HOST:PORT] ...` and `ddpx serve token add USER [--admin]`:
// the job service (src/serve/). Torch-free: the `ddpx` front runs it.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "serve/server.h"

namespace ddpx::cli {

void add_serve_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<serve::ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the job service: a REST API (/api/v1) that runs users' training jobs on this node's "
      "devices and ports, queued first come first served (docs/serve.md)");
  const char* state_help = "State folder (SQLite database, logs); required";
  cmd->add_option("--state", o->state_dir, state_help);
  cmd->add_option("--listen", o->listen, "HOST:PORT to serve on")->capture_default_str();
  cmd->add_option("--slots", o->slots, "CPU slots on a host without GPUs (default: its cores)");
  cmd->add_option("--quota", o->user_quota, "Devices one user may hold at once (0: no limit)")
      ->capture_default_str();
  cmd->add_flag("--insecure", o->insecure, "Allow a non-loopback --listen without TLS");
  cmd->add_option("--tls_cert", o->tls_cert, "PEM certificate for HTTPS");
  cmd->add_option("--tls_key", o->tls_key, "PEM private key for HTTPS");
  cmd->add_option("--scheduler", o->scheduler,
                  "local: run jobs on this node's devices; slurm: hand each job to Slurm "
                  "(sbatch), which queues and places it (--state on a shared file system)")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str();
  cmd->add_option("--slurm_partition", o->slurm.partition, "With --scheduler slurm: the partition");
  cmd->add_option("--slurm_account", o->slurm.account, "With --scheduler slurm: the account");
  cmd->add_option("--slurm_time", o->slurm.time,
                  "With --scheduler slurm: each job's time limit (Slurm's --time)");
  cmd->add_flag("--slurm_gpus", o->slurm.gpus,
                "With --scheduler slurm: one GPU per worker (--gpus-per-node=WORKERS)");

  CLI::App* token = cmd->add_subcommand("token", "Manage the service's tokens");
  CLI::App* add = token->add_subcommand("add",
                                        "Create USER's token (printed once; only its "
                                        "SHA-256 is stored)");
  // --state where users put it: `ddpx serve --state S token add U` or `... token add U --state S`.
  token->add_option("--state", o->state_dir, state_help);
  add->add_option("--state", o->state_dir, state_help);
  auto need_state = [o](const char* what) {
    DDPX_CHECK(!o->state_dir.empty(), ErrorKind::kUsage,
               "{}: give --state DIR (the service's state folder: its SQLite database and logs)",
               what);
  };
  auto user = std::make_shared<std::string>();
  auto admin = std::make_shared<bool>(false);
  add->add_option("USER", *user, "User name")->required();
  add->add_flag("--admin", *admin, "The user sees and manages every job");
  add->callback([o, user, admin, need_state, &exit_code] {
    need_state("ddpx serve token add");
    std::printf("%s\n", serve::add_token(o->state_dir, *user, *admin).c_str());
    exit_code = 0;
  });
  cmd->callback([cmd, token, o, need_state, &exit_code] {
    if (token->parsed()) return;
    need_state("ddpx serve");
    exit_code = serve::run_service(*o);
  });
}

}  // namespace ddpx::cli
