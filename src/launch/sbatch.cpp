#include "launch/sbatch.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "launch/host.h"
#include "launch/plan.h"

namespace ddpx::launch {
namespace {

bool has_flag(const std::vector<std::string>& words, const std::string& flag) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) {
    return w == flag || w.rfind(flag + "=", 0) == 0;
  });
}

int tasks_per_node(const SbatchOptions& o) {
  if (o.ntasks_per_node > 0) return o.ntasks_per_node;
  return o.gpus_per_node > 0 ? o.gpus_per_node : 1;
}

}  // namespace

void validate(const SbatchOptions& o) {
  constexpr ErrorKind usage = ErrorKind::kUsage;
  DDPX_CHECK(o.nodes >= 1, usage, "--nodes {}: give at least 1", o.nodes);
  DDPX_CHECK(o.gpus_per_node >= 0, usage, "--gpus_per_node {}: give 0 or more", o.gpus_per_node);
  DDPX_CHECK(o.ntasks_per_node >= 0, usage, "--ntasks_per_node {}: give 1 or more",
             o.ntasks_per_node);
  DDPX_CHECK(o.gpus_per_node == 0 || o.ntasks_per_node == 0 || o.ntasks_per_node == o.gpus_per_node,
             usage,
             "--ntasks_per_node {} with --gpus_per_node {}: ddpx runs one task per GPU; drop "
             "--ntasks_per_node",
             o.ntasks_per_node, o.gpus_per_node);
  // Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
  static const std::regex time_form(R"(^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2})$)");
  DDPX_CHECK(o.time.empty() || std::regex_match(o.time, time_form), usage,
             "--time '{}' is not a Slurm time; expected e.g. 30, 01:00:00 or 2-00:00:00", o.time);
  static const std::regex name_form(R"(^[A-Za-z0-9._-]+$)");
  DDPX_CHECK(std::regex_match(o.job_name, name_form), usage,
             "--job_name '{}': use letters, digits, '.', '_' and '-'", o.job_name);
  DDPX_CHECK(!o.command.empty(), usage,
             "ddpx sbatch: no command; add `-- train ARGS...` (or a program) at the end");
  DDPX_CHECK(o.requeue_signal_s >= 0 && o.requeue_signal_s <= 65535, usage,
             "--requeue_signal_s {}: give 0 (off) to 65535 seconds", o.requeue_signal_s);
  DDPX_CHECK(o.requeue_signal_s == 0 ||
                 (o.command.front() == "train" && has_flag(o.command, "--save_dir")),
             usage,
             "--requeue_signal_s needs `train ... --save_dir DIR` (on a shared file system): the "
             "requeued job resumes from the checkpoints there");
}

std::string make_sbatch_script(const SbatchOptions& o) {
  validate(o);
  std::string log_dir = std::filesystem::absolute(o.log_dir).lexically_normal().string();
  std::string s = "#!/bin/bash\n";
  s += "# Written by `ddpx sbatch`: one srun of ddpx workers, one task per GPU "
       "(docs/clusters.md).\n";
  s += fmt::format("#SBATCH --job-name={}\n", o.job_name);
  s += fmt::format("#SBATCH --nodes={}\n", o.nodes);
  s += fmt::format("#SBATCH --ntasks-per-node={}\n", tasks_per_node(o));
  if (o.gpus_per_node > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", o.gpus_per_node);
  if (o.cpus_per_task > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_task);
  if (!o.time.empty()) s += fmt::format("#SBATCH --time={}\n", o.time);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.account.empty()) s += fmt::format("#SBATCH --account={}\n", o.account);
  s += fmt::format("#SBATCH --output={}/%x-%j.out\n", log_dir);
  // A requeued (or node-failure restarted) job reopens its output: append, keep the first run.
  s += "#SBATCH --open-mode=append\n";
  if (o.requeue_signal_s > 0) {
    s += fmt::format("#SBATCH --signal=B:USR1@{}\n", o.requeue_signal_s);
    s += "#SBATCH --requeue\n";
  }
  s += "set -euo pipefail\n";
  if (o.requeue_signal_s > 0) {
    // First thing: a warning that came before the trap would kill the shell unrequeued.
    s +=
        "\n# Slurm's warning before the time limit: the tasks write a snapshot at their next step\n"
        "# and stop (SIGUSR2, which srun forwards), then the job is requeued; the next run\n"
        "# resumes from the snapshot (--resume auto).\n";
    s += "requeued=0\n";
    s += "requeue() {\n";
    s += "  echo \"ddpx sbatch: time limit near; snapshot, then requeueing job $SLURM_JOB_ID\"\n";
    s += "  kill -USR2 \"$srun_pid\" 2>/dev/null || true\n";
    s += "  wait \"$srun_pid\" || true\n";
    s += "  requeued=1\n";
    s += "  scontrol requeue \"$SLURM_JOB_ID\"\n";
    s += "}\n";
    s += "trap requeue USR1\n";
  }
  s +=
      "\n# Rank 0 runs on the first node of the allocation; the port follows from the job id, so\n";
  s += "# jobs sharing a node do not collide.\n";
  s += "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 1p)\n";
  s += "MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n";
  s += "export MASTER_ADDR MASTER_PORT\n";
  s += "echo \"ddpx sbatch: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on "
       "$SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT\"\n\n";
  std::vector<std::string> words = {"srun", "--kill-on-bad-exit=1"};
  if (!o.task_log_dir.empty()) {
    std::string dir = std::filesystem::absolute(o.task_log_dir).lexically_normal().string();
    words.push_back("--output=" + dir + "/rank%t.log");  // %t: the task's rank
  }
  bool self = o.command.front() == "train";
  if (self) words.push_back(o.ddpx_path);
  words.insert(words.end(), o.command.begin(), o.command.end());
  if (o.requeue_signal_s > 0 && !has_flag(o.command, "--resume")) {
    words.push_back("--resume");
    words.push_back("auto");
  }
  std::string srun;
  for (const std::string& w : words) srun += (srun.empty() ? "" : " ") + shell_quote(w);
  if (o.requeue_signal_s == 0) {
    s += srun + "\n";
    return s;
  }
  s += srun + " &\n";
  s += "srun_pid=$!\n";
  // A trapped signal ends the wait early; the trap has then waited for srun itself.
  s += "status=0\n";
  s += "wait \"$srun_pid\" || status=$?\n";
  s += "if ((requeued)); then exit 0; fi\n";
  s += "exit \"$status\"\n";
  return s;
}

std::string write_sbatch_script(const SbatchOptions& o) {
  std::string text = make_sbatch_script(o);
  std::string path = o.script.empty() ? o.job_name + ".sbatch" : o.script;
  std::error_code ec;
  for (const std::string& dir : {o.log_dir, o.task_log_dir}) {
    if (dir.empty()) continue;
    std::filesystem::create_directories(dir, ec);
    DDPX_CHECK(!ec, ErrorKind::kIo, "--log_dir {}: cannot create it ({}); choose another", dir,
               ec.message());
  }
  write_file_atomic(path, text);
  ::chmod(path.c_str(), 0755);
  return path;
}

std::string submit_sbatch(const std::string& script_path, bool test_only) {
  std::string sbatch;
  try {
    sbatch = find_program("sbatch");
  } catch (const Error&) {
    fail(ErrorKind::kIo,
         "ddpx sbatch --submit: sbatch is not on PATH; install slurm-client, or run `sbatch {}` "
         "on a login node",
         script_path);
  }
  ProgramOutput run =
      run_program({sbatch, test_only ? "--test-only" : "--parsable", script_path}, 60);
  DDPX_CHECK(run.exit_code == 0, ErrorKind::kIo, "sbatch {} failed: {}", script_path, run.output);
  if (test_only) return run.output;
  // --parsable prints "jobid" or "jobid;cluster".
  return run.output.substr(0, run.output.find(';'));
}

}  // namespace ddpx::launch
