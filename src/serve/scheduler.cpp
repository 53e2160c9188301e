#include "serve/scheduler.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "launch/job_control.h"
#include "serve/job_files.h"
#include "serve/placement.h"

namespace ddpx::serve {
namespace {

constexpr auto kTick = std::chrono::milliseconds(200);

}  // namespace

Scheduler::Scheduler(Store& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)), placement_(make_placement(store, options_)) {
  std::filesystem::create_directories(options_.state_dir + "/logs");
  tick();  // re-adopt or close what ran before a restart, before serving requests
  loop_ = std::thread([this] {
    while (!stop_.load()) {
      std::this_thread::sleep_for(kTick);
      try {
        tick();
      } catch (const std::exception&) {
        // A failed pass (the database busy, a fork failing) is retried on the next tick.
      }
    }
  });
}

Scheduler::~Scheduler() {
  stop_.store(true);
  if (loop_.joinable()) loop_.join();
}

int Scheduler::total_slots() const { return placement_->slots(); }

const char* Scheduler::placement_name() const { return placement_->name(); }

Job Scheduler::submit(const std::string& user, const std::vector<std::string>& command, int workers,
                      int extra_ports, const std::vector<std::string>& checkpoints, int nodes) {
  DDPX_CHECK(!command.empty() && !command.front().empty(), ErrorKind::kUsage,
             "command: no program; give the program and its arguments, e.g. [\"train\", "
             "\"--model\", \"resnet18\"]");
  DDPX_CHECK(workers >= 1 && (total_slots() == 0 || workers <= total_slots()), ErrorKind::kUsage,
             "workers: {} cannot run on this host, which has {} device slot(s)", workers,
             total_slots());
  DDPX_CHECK(options_.user_quota == 0 || workers <= options_.user_quota, ErrorKind::kUsage,
             "workers: {} is over the per-user quota of {} device(s)", workers,
             options_.user_quota);
  DDPX_CHECK(extra_ports >= 0 && extra_ports <= 8, ErrorKind::kUsage,
             "ports: {} extra ports asked; give 0 to 8", extra_ports);
  DDPX_CHECK(nodes >= 1, ErrorKind::kUsage, "nodes: {}; give 1 or more", nodes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    placement_->check(command, workers, nodes, extra_ports);  // before the job is kept
  }
  Job job;
  job.user = user;
  job.command = command;
  job.workers = workers;
  job.nodes = nodes;
  job.extra_ports = extra_ports;
  job.submitted = std::time(nullptr);
  {
    // Under the lock: the loop cannot start the job before its checkpoints are in place.
    std::lock_guard<std::mutex> lock(mutex_);
    job.id = store_.insert_job(job);
    if (!checkpoints.empty()) {
      namespace fs = std::filesystem;
      std::string dir = job_checkpoints_dir(options_.state_dir, job.id);
      std::error_code ec;
      fs::create_directories(dir, ec);
      for (const std::string& file : checkpoints) {  // a file, or a folder of parts
        if (!ec) {
          fs::copy(file, dir + "/" + fs::path(file).filename().string(),
                   fs::copy_options::recursive, ec);
        }
      }
      if (ec) {
        store_.delete_job(job.id);
        fail(ErrorKind::kIo, "cannot copy the checkpoints into {}: {}", dir, ec.message());
      }
    }
  }
  tick();
  return *store_.job(job.id);
}

Job Scheduler::stop(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  if (job.state == JobState::kQueued && !placement_->holds(job)) {
    job.state = JobState::kEnded;
    job.stop_requested = true;
    job.exit_code = 143;  // as if SIGTERM had ended it
    job.ended = std::time(nullptr);
  } else if (job.state == JobState::kQueued || job.state == JobState::kRunning) {
    if (placement_->holds(job)) placement_->stop(job);  // its end comes with a later tick
    job.stop_requested = true;
    job.state = JobState::kStopping;
  }
  store_.update_job(job);
  return job;
}

void Scheduler::snapshot(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  DDPX_CHECK(job.state == JobState::kRunning && placement_->holds(job), ErrorKind::kUsage,
             "job {} is {}; only a running job can take a snapshot", id, job_state_name(job.state));
  std::vector<std::string> command = job.command;  // as it runs: with the service's --save_dir
  if (is_train_command(command))
    command.push_back("--save_dir=" + job_checkpoints_dir(options_.state_dir, id));
  std::string refusal = launch::snapshot_refusal(command);
  DDPX_CHECK(refusal.empty(), ErrorKind::kUsage, "job {} {}", id, refusal);
  placement_->snapshot(job);
}

Job Scheduler::restart(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Job job = *store_.job(id);
  DDPX_CHECK(job.state == JobState::kEnded, ErrorKind::kUsage,
             "job {} is {}; only an ended job can be restarted (stop it first)", id,
             job_state_name(job.state));
  job.state = JobState::kQueued;
  job.stop_requested = false;
  job.exit_code = 0;
  job.pid = 0;
  job.slots.clear();
  job.ports.clear();
  job.started = job.ended = 0;
  job.slurm_id.clear();
  job.slurm_state.clear();
  store_.update_job(job);
  return job;
}

void Scheduler::tick() {
  std::lock_guard<std::mutex> lock(mutex_);
  placement_->refresh();
  start_fitting();
}

void Scheduler::start_fitting() {
  // The devices each user holds: their running jobs', and those the placement holds in a queue
  // of its own (Slurm's).
  std::map<std::string, int> held;
  for (JobState state : {JobState::kRunning, JobState::kStopping})
    for (const Job& job : store_.jobs_in(state)) held[job.user] += job.workers;
  std::vector<Job> queued = store_.jobs_in(JobState::kQueued);
  for (const Job& job : queued)
    if (placement_->holds(job)) held[job.user] += job.workers;
  for (Job& job : queued) {
    if (placement_->holds(job)) continue;
    if (options_.user_quota > 0 && held[job.user] + job.workers > options_.user_quota) continue;
    if (!placement_->start(job)) break;  // first come, first served
    held[job.user] += job.workers;
  }
}

}  // namespace ddpx::serve
