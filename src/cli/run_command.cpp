// `ddpx run N [options] -- PROGRAM ARGS...`: the launcher's command line. The work is in
// src/launch/ (launcher.h); this file only maps flags onto LaunchOptions.
#include <CLI/CLI.hpp>
#include <iterator>

#include "cli/commands.h"
#include "launch/launcher.h"

namespace ddpx::cli {

void add_run_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<launch::LaunchOptions>();
  auto tee = std::make_shared<std::string>("0");
  auto nnodes = std::make_shared<std::string>("1");
  CLI::App* run = app.add_subcommand(
      "run",
      "Start N workers on this node, each running PROGRAM with RANK, LOCAL_RANK, WORLD_SIZE, "
      "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS and "
      "DDPX_THREADS set; PROGRAM may be a ddpx subcommand (`ddpx run 2 -- train ...`) or any "
      "program (`ddpx run 2 -- ./my_trainer`). See docs/launcher.md.");
  run->add_option("N", options->nproc_per_node, "Workers on this node")->required();
  run->add_option("--nnodes", *nnodes,
                  "Nodes in the job, or auto: as many as join the rendezvous (at least 2)")
      ->capture_default_str();
  run->add_option("--node_rank", options->node_rank,
                  "This node's rank, 0 .. nnodes-1 (default: 0 on one node; on several, "
                  "assigned at rendezvous: the host of --master_addr is 0, the others in join "
                  "order)");
  run->add_option("--rdzv_timeout", options->rdzv_timeout_s,
                  "Seconds for every node to join when node ranks are assigned")
      ->capture_default_str();
  run->add_option("--rdzv_last_call", options->rdzv_last_call_s,
                  "--nnodes auto: the job forms once no node joined for this many seconds")
      ->capture_default_str();
  run->add_option("--master_addr", options->master_addr,
                  "Address of node 0 (default 127.0.0.1; required with --nnodes > 1)");
  run->add_option("--master_port", options->master_port,
                  "Rendezvous port (default: a free one picked by the launcher; required with "
                  "--nnodes > 1)");
  run->add_option("--log_dir", options->log_dir,
                  "Per-rank logs go to LOG_DIR/<YYYYmmdd-HHMMSS>_<job>/rank<K>.log")
      ->capture_default_str();
  run->add_option("--job_name", options->job_name,
                  "Job name in the log folder (default: a short id)");
  run->add_option("--tee", *tee, "Console shows: 0 (local rank 0), all ([rank K] prefixed), none")
      ->capture_default_str();
  run->add_option("--grace_s", options->grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  run->add_option(
      "--threads_per_worker", options->threads_per_worker,
      "Intra-op threads per worker (default: $OMP_NUM_THREADS, else usable cores / N, at least 1)");
  run->add_option("--gpus", options->gpus,
                  "GPU ids, one per worker (e.g. 0,1), or none (default: the first N visible)");
  run->add_option("--max_restarts", options->max_restarts,
                  "Restart all workers up to this many times when one fails")
      ->capture_default_str();
  run->add_flag("--dry_run", options->dry_run,
                "Print each worker's environment and command line; start nothing");
  run->add_option("command", options->command,
                  "PROGRAM ARGS... after `--`: a ddpx subcommand or a program");
  run->callback([options, tee, nnodes, &exit_code] {
    options->tee = launch::parse_tee(*tee);
    options->nnodes = launch::parse_nnodes(*nnodes);
    options->self_subcommands.assign(std::begin(kCommandNames), std::end(kCommandNames));
    exit_code = launch::run_job(*options);
  });
}

}  // namespace ddpx::cli
