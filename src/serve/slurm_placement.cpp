#include "serve/slurm_placement.h"

#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/subprocess.h"
#include "serve/job_files.h"
#include "serve/slurm_jobs.h"

namespace ddpx::serve {
namespace {

constexpr auto kSlurmPoll = std::chrono::seconds(1);  // slurmctld is shared: ask it gently

}  // namespace

SlurmPlacement::SlurmPlacement(Store& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)) {}

launch::SbatchOptions SlurmPlacement::slurm_script(const std::vector<std::string>& command,
                                                   int workers, int nodes, int64_t id) const {
  const SlurmSettings& slurm = *options_.slurm;
  launch::SbatchOptions s;
  s.nodes = nodes;
  s.ntasks_per_node = workers / nodes;
  s.gpus_per_node = slurm.gpus ? workers / nodes : 0;
  s.time = slurm.time;
  s.partition = slurm.partition;
  s.account = slurm.account;
  s.job_name = job_name(id);
  s.log_dir = options_.state_dir + "/logs";  // the batch shell's own output: svcID-SLURMID.out
  s.task_log_dir = options_.state_dir + "/logs/" + job_name(id);
  s.script = options_.state_dir + "/slurm/" + job_name(id) + ".sbatch";
  s.ddpx_path = options_.ddpx_path;
  s.command = command;
  if (is_train_command(command)) {
    s.command.push_back("--save_dir");
    s.command.push_back(job_checkpoints_dir(options_.state_dir, id));
  }
  return s;
}

void SlurmPlacement::check(const std::vector<std::string>& command, int workers, int nodes,
                           int extra_ports) {
  DDPX_CHECK(workers % nodes == 0, ErrorKind::kUsage,
             "workers: {} do not spread evenly over {} nodes; give a multiple of nodes", workers,
             nodes);
  DDPX_CHECK(extra_ports == 0, ErrorKind::kUsage,
             "ports: extra ports cannot be given with --scheduler slurm (the job runs on a node "
             "Slurm picks); give 0");
  // Slurm's reason (400) before the job is kept.
  launch::SbatchOptions s = slurm_script(command, workers, nodes, 0);
  s.script = options_.state_dir + "/slurm/.check.sbatch";  // one at a time: see placement.h
  s.task_log_dir.clear();
  std::filesystem::create_directories(options_.state_dir + "/slurm");
  launch::write_sbatch_script(s);
  ProgramOutput test = run_program({"sbatch", "--test-only", s.script}, 60);
  std::filesystem::remove(s.script);
  if (test.exit_code == 0) return;
  // sbatch's own words, without its "sbatch: error: " prefixes.
  std::string why;
  std::istringstream lines(test.output);
  for (std::string line; std::getline(lines, line);) {
    for (const char* prefix : {"sbatch: error: ", "sbatch: "})
      if (line.rfind(prefix, 0) == 0) line.erase(0, std::strlen(prefix));
    if (!line.empty()) why += (why.empty() ? "" : "; ") + line;
  }
  fail(ErrorKind::kUsage, "workers: Slurm cannot run {} worker(s) on {} node(s) as asked: {}",
       workers, nodes, why);
}

bool SlurmPlacement::start(Job& job) {
  submit_to_slurm(job);
  return true;
}

void SlurmPlacement::submit_to_slurm(Job& job) {
  try {
    std::string script =
        launch::write_sbatch_script(slurm_script(job.command, job.workers, job.nodes, job.id));
    job.slurm_id = launch::submit_sbatch(script);
    job.slurm_state = "PENDING";
    job.log_dir = options_.state_dir + "/logs/" + job_name(job.id);
    // The script's rendezvous port (launch/sbatch.cpp), on the node Slurm picks.
    job.ports = {20000 + static_cast<int>(std::stoll(job.slurm_id) % 20000)};
  } catch (const std::exception& e) {
    job.state = JobState::kEnded;
    job.exit_code = 1;
    job.ended = std::time(nullptr);
    job.slurm_state = std::string("not submitted: ") + e.what();
  }
  store_.update_job(job);
}

void SlurmPlacement::refresh() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_slurm_poll_ < kSlurmPoll) return;
  std::vector<Job> active;
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kStopping}) {
    for (Job& job : store_.jobs_in(state))
      if (!job.slurm_id.empty()) active.push_back(job);
  }
  if (active.empty()) return;
  std::vector<std::string> ids;
  for (const Job& job : active) ids.push_back(job.slurm_id);
  std::map<std::string, SlurmStatus> status;
  try {
    status = slurm_jobs(ids);
  } catch (const std::exception&) {
    return;  // slurmctld busy or restarting: ask again on a later tick
  }
  last_slurm_poll_ = now;
  for (Job& job : active) {
    Job before = job;
    auto it = status.find(job.slurm_id);
    if (it == status.end()) {
      // Ended so long ago that slurmctld dropped it (MinJobAge) while the service was away.
      job.state = JobState::kEnded;
      job.exit_code = job.stop_requested ? 143 : 137;
      job.ended = std::time(nullptr);
      job.slurm_state = "gone from slurmctld; its end was not seen";
      store_.update_job(job);
      continue;
    }
    const SlurmStatus& s = it->second;
    job.slurm_state = s.state + (s.reason.empty() || s.reason == "None" ? "" : " " + s.reason);
    switch (s.phase) {
      case SlurmStatus::Phase::kPending:
        if (job.state == JobState::kRunning) job.state = JobState::kQueued;  // requeued
        break;
      case SlurmStatus::Phase::kRunning:
        if (job.state == JobState::kQueued) {
          job.state = JobState::kRunning;
          job.started = std::time(nullptr);
        }
        break;
      case SlurmStatus::Phase::kEnded:
        job.state = JobState::kEnded;
        job.exit_code = s.exit_code;
        job.ended = std::time(nullptr);
        if (job.started == 0) job.started = job.ended;
        break;
    }
    if (job.state != before.state || job.slurm_state != before.slurm_state) store_.update_job(job);
  }
}

void SlurmPlacement::stop(const Job& job) {
  slurm_cancel(job.slurm_id);  // Slurm ends it (143, as SIGTERM); refresh() sees it
}

void SlurmPlacement::snapshot(const Job& job) {
  slurm_cancel(job.slurm_id, "USR1");  // to every task (not the batch shell)
}

}  // namespace ddpx::serve
