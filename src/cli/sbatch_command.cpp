// `ddpx sbatch [options] -- train ARGS`: writes (and with --submit submits) a Slurm batch script
// (src/launch/sbatch.h). Torch-free: the `ddpx` front runs it.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "launch/host.h"
#include "launch/sbatch.h"

namespace ddpx::cli {

void add_sbatch_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<launch::SbatchOptions>();
  auto submit = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "sbatch",
      "Write a Slurm batch script that runs COMMAND (e.g. `train ARGS`) as one srun of ddpx "
      "workers, one task per GPU, master from the node list; --submit submits it");
  cmd->add_option("--nodes", o->nodes, "Nodes")->capture_default_str();
  cmd->add_option("--gpus_per_node", o->gpus_per_node, "GPUs per node (0: CPU tasks)")
      ->capture_default_str();
  cmd->add_option("--ntasks_per_node", o->ntasks_per_node,
                  "Tasks per node (default: one per GPU, or 1 without GPUs)");
  cmd->add_option("--cpus_per_task", o->cpus_per_task, "CPUs per task (default: Slurm's)");
  cmd->add_option("--time", o->time, "Time limit, e.g. 01:00:00 (default: the partition's)");
  cmd->add_option("--partition", o->partition, "Partition");
  cmd->add_option("--account", o->account, "Account");
  cmd->add_option("--job_name", o->job_name, "Slurm job name")->capture_default_str();
  cmd->add_option("--log_dir", o->log_dir, "Job output goes to LOG_DIR/<name>-<jobid>.out")
      ->capture_default_str();
  cmd->add_option("--requeue_signal_s", o->requeue_signal_s,
                  "Seconds before the time limit to requeue the job, which resumes from "
                  "--save_dir (0: off)")
      ->capture_default_str();
  cmd->add_option("--script", o->script, "Where to write the script (default: <job_name>.sbatch)");
  cmd->add_option("--ddpx", o->ddpx_path, "The ddpx binary the nodes run (default: this one)");
  cmd->add_flag("--submit", *submit, "Submit it with sbatch and print the job id");
  cmd->add_option("command", o->command, "COMMAND ARGS... after `--`: train ARGS, or a program");
  cmd->callback([o, submit, &exit_code] {
    if (o->ddpx_path.empty()) {
      // The front's own path: ddpx, not ddpx-torch, so the nodes start without libtorch first.
      std::string self = launch::self_executable();
      std::string dir = self.substr(0, self.rfind('/') + 1);
      o->ddpx_path = dir + "ddpx";
    }
    std::string path = launch::write_sbatch_script(*o);
    std::fprintf(stderr, "ddpx sbatch: wrote %s\n", path.c_str());
    if (*submit) {
      std::string id = launch::submit_sbatch(path);
      std::printf("Submitted batch job %s\n", id.c_str());
    }
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
