// `ddpx jobs`, `ddpx logs`, `ddpx stop`, `ddpx snapshot` and `ddpx shell`: this host's jobs and
// reservations (src/launch/job_control.h, shell.h); with --server the same verbs, `ddpx submit`,
// `ddpx backup` and `ddpx restore` talk to a job service (src/serve/client.h). Torch-free: the
// `ddpx` front runs them itself.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/env.h"
#include "core/error.h"
#include "launch/job_control.h"
#include "launch/shell.h"
#include "serve/client.h"

namespace ddpx::cli {
namespace {

// --server URL and --token T: the same verb, answered by a `ddpx serve` instead of this host.
// $DDPX_SERVER gives the URL once for a shell, as $DDPX_TOKEN gives the token; `--server local`
// then means this host again.
void add_server_flags(CLI::App* cmd, serve::ClientOptions& o) {
  o.server = env::get_or("DDPX_SERVER", "");
  cmd->add_option_function<std::string>(
      "--server", [&o](const std::string& url) { o.server = url == "local" ? "" : url; },
      "A job service (ddpx serve), e.g. http://node7:8470 (default: $DDPX_SERVER; `local`: this "
      "host)");
  cmd->add_option("--token", o.token, "Its token (default: $DDPX_TOKEN)");
}

long long service_job_id(const std::string& id) {
  try {
    size_t used = 0;
    long long value = std::stoll(id, &used);
    if (used == id.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  fail(ErrorKind::kUsage, "JOB '{}': a service's job ids are numbers (`ddpx jobs --server ...`)",
       id);
}

void add_jobs(CLI::App& app, int& exit_code) {
  auto all = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  CLI::App* jobs = app.add_subcommand(
      "jobs", "List this host's ddpx jobs and shells: id, user, pid, devices, port, start, logs");
  jobs->add_flag("--all", *all, "Also jobs that ended (kept a week) or were killed (lost)");
  jobs->add_flag("--json", *json, "A JSON array instead of the table");
  auto server = std::make_shared<serve::ClientOptions>();
  add_server_flags(jobs, *server);
  jobs->callback([all, json, server, &exit_code] {
    exit_code = 0;
    if (!server->server.empty()) {
      std::fputs(serve::client_jobs(*server).c_str(), stdout);
      return;
    }
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
  auto server = std::make_shared<serve::ClientOptions>();
  add_server_flags(logs, *server);
  logs->callback([id, rank, follow, server, &exit_code] {
    if (!server->server.empty()) {
      serve::client_logs(*server, service_job_id(*id), *rank, *follow);
    } else {
      launch::show_logs(*id, *rank, *follow);
    }
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
  auto server = std::make_shared<serve::ClientOptions>();
  add_server_flags(stop, *server);
  stop->callback([id, timeout, server, &exit_code] {
    if (!server->server.empty()) {
      std::string state = serve::client_stop(*server, service_job_id(*id));
      std::fprintf(stderr, "ddpx stop: job %s is %s\n", id->c_str(), state.c_str());
      exit_code = 0;
      return;
    }
    int code = launch::stop_job(*id, *timeout);
    std::fprintf(stderr, "ddpx stop: job %s ended (exit code %d)\n", id->c_str(), code);
    exit_code = 0;
  });
}

void add_snapshot(CLI::App& app, int& exit_code) {
  auto id = std::make_shared<std::string>();
  auto stop = std::make_shared<bool>(false);
  auto list = std::make_shared<bool>(false);
  auto restore = std::make_shared<std::string>();
  CLI::App* snapshot = app.add_subcommand(
      "snapshot",
      "Ask a running `ddpx train` job for a snapshot: a checkpoint in its --save_dir at its next "
      "step (SIGUSR1 to its launcher); it goes on training unless --stop");
  snapshot->add_option("JOB", *id, "The job id (`ddpx jobs`)")->required();
  snapshot->add_flag("--stop", *stop, "Stop the job after the snapshot (SIGUSR2)");
  auto server = std::make_shared<serve::ClientOptions>();
  add_server_flags(snapshot, *server);
  snapshot->add_flag("--list", *list, "With --server: list the job's checkpoints and snapshots");
  snapshot->add_option("--restore", *restore,
                       "With --server: start a new job from this snapshot (a NAME from --list)");
  snapshot->callback([id, stop, list, restore, server, &exit_code] {
    exit_code = 0;
    if (server->server.empty()) {
      DDPX_CHECK(!*list && restore->empty(), ErrorKind::kUsage,
                 "--list and --restore need --server (a job service); on this host the "
                 "snapshots are the job's --save_dir files");
      launch::snapshot_job(*id, *stop);
      std::fprintf(stderr, "ddpx snapshot: asked job %s for a snapshot%s\n", id->c_str(),
                   *stop ? ", then to stop" : "");
      return;
    }
    DDPX_CHECK(!*stop, ErrorKind::kUsage,
               "--stop: not with --server; `ddpx stop JOB --server ...` after the snapshot");
    long long job = service_job_id(*id);
    if (*list) {
      std::fputs(serve::client_snapshots(*server, job).c_str(), stdout);
    } else if (!restore->empty()) {
      std::printf("%lld\n", serve::client_restore_snapshot(*server, job, *restore));
    } else {
      serve::client_snapshot(*server, job);
      std::fprintf(stderr, "ddpx snapshot: asked job %s for a snapshot\n", id->c_str());
    }
  });
}

void add_backup(CLI::App& app, int& exit_code) {
  auto server = std::make_shared<serve::ClientOptions>();
  auto id = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto snapshots = std::make_shared<std::string>("latest");
  CLI::App* backup = app.add_subcommand(
      "backup",
      "Export a job service's job as one .tar.gz (settings, snapshots, logs, metrics, with a "
      "manifest and checksums); `ddpx restore FILE` imports it on another service");
  backup->add_option("JOB", *id, "The job id (`ddpx jobs --server ...`)")->required();
  add_server_flags(backup, *server);
  backup->add_option("-o,--out", *out, "Where to write it (default: ddpx-job-JOB.tar.gz)");
  backup->add_option("--snapshots", *snapshots, "Which checkpoints: latest, all, none or NAME,NAME")
      ->capture_default_str();
  backup->callback([server, id, out, snapshots, &exit_code] {
    DDPX_CHECK(!server->server.empty(), ErrorKind::kUsage,
               "ddpx backup: give --server URL or set DDPX_SERVER (the job service, `ddpx serve`)");
    long long job = service_job_id(*id);
    std::string path = out->empty() ? "ddpx-job-" + *id + ".tar.gz" : *out;
    serve::client_backup(*server, job, *snapshots, path);
    std::fprintf(stderr, "ddpx backup: job %s written to %s\n", id->c_str(), path.c_str());
    exit_code = 0;
  });

  auto file = std::make_shared<std::string>();
  auto restore_server = std::make_shared<serve::ClientOptions>();
  CLI::App* restore = app.add_subcommand(
      "restore",
      "Import a backup (`ddpx backup`) into a job service: a new job that resumes from its "
      "snapshot; prints the new job's id");
  restore->add_option("FILE", *file, "The backup (.tar.gz)")->required();
  add_server_flags(restore, *restore_server);
  restore->callback([restore_server, file, &exit_code] {
    DDPX_CHECK(
        !restore_server->server.empty(), ErrorKind::kUsage,
        "ddpx restore: give --server URL or set DDPX_SERVER (the job service, `ddpx serve`)");
    std::printf("%lld\n", serve::client_import(*restore_server, *file));
    exit_code = 0;
  });
}

void add_submit(CLI::App& app, int& exit_code) {
  auto server = std::make_shared<serve::ClientOptions>();
  auto workers = std::make_shared<int>(1);
  auto ports = std::make_shared<int>(0);
  auto nodes = std::make_shared<int>(1);
  auto command = std::make_shared<std::vector<std::string>>();
  CLI::App* submit = app.add_subcommand(
      "submit",
      "Submit a job to a job service (ddpx serve): it runs `ddpx run N -- COMMAND` "
      "when N devices are free, and prints the job's id");
  add_server_flags(submit, *server);
  submit->add_option("-n,--workers", *workers, "Workers (devices)")->capture_default_str();
  submit->add_option("--ports", *ports, "Extra ports for the job's own services")
      ->capture_default_str();
  submit
      ->add_option("--nodes", *nodes,
                   "Nodes the workers spread over (a service with --scheduler slurm)")
      ->capture_default_str();
  submit->add_option("command", *command, "COMMAND ARGS... after `--` (e.g. train --model mlp)")
      ->required();
  submit->callback([server, workers, ports, nodes, command, &exit_code] {
    DDPX_CHECK(!server->server.empty(), ErrorKind::kUsage,
               "ddpx submit: give --server URL or set DDPX_SERVER (the job service, `ddpx serve`)");
    std::printf("%lld\n", serve::client_submit(*server, *command, *workers, *ports, *nodes));
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
  add_snapshot(app, exit_code);
  add_backup(app, exit_code);
  add_shell(app, exit_code);
  add_submit(app, exit_code);
}

}  // namespace ddpx::cli
