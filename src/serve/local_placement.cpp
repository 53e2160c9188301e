#include "serve/local_placement.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/subprocess.h"
#include "launch/host.h"
#include "launch/job_record.h"
#include "serve/job_files.h"

namespace ddpx::serve {
namespace {

// Thrown by the device chooser when the job does not fit now.
struct NoRoom {};

// The launcher's record of `job` among `records`: its id, written by a launcher of this
// service (its logs under STATE/logs) or the hold this service keeps for it.
const launch::JobRecord* record_of(const std::vector<launch::JobRecord>& records, const Job& job,
                                   const std::string& state_dir, bool holding) {
  const std::string logs = state_dir + "/logs/";
  const launch::JobRecord* found = nullptr;
  for (const launch::JobRecord& r : records) {
    if (r.id != job_name(job.id)) continue;
    if (r.kind == launch::kStartingKind ? !holding : r.log_dir.rfind(logs, 0) != 0) continue;
    found = &r;
    if (r.state == launch::JobState::kLive) break;
  }
  return found;
}

}  // namespace

LocalPlacement::LocalPlacement(Store& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)) {
  // Slot i is the i-th visible GPU, as the launcher and the host's table name it: the ids of
  // CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES when set.
  if (!options_.gpus.empty()) {
    std::vector<std::string> visible = launch::detect_gpus().ids;
    for (int slot : options_.gpus)
      gpu_ids_[slot] = slot >= 0 && static_cast<size_t>(slot) < visible.size()
                           ? visible[static_cast<size_t>(slot)]
                           : std::to_string(slot);
  }
}

int LocalPlacement::slots() const {
  return options_.gpus.empty() ? options_.cpu_slots : static_cast<int>(options_.gpus.size());
}

void LocalPlacement::check(const std::vector<std::string>&, int, int nodes, int) {
  DDPX_CHECK(nodes == 1, ErrorKind::kUsage,
             "nodes: {}: this service runs each job on this node (give 1); `ddpx serve "
             "--scheduler slurm` spreads jobs over nodes",
             nodes);
}

bool LocalPlacement::start(Job& job) {
  // CPU slots are this service's alone; a GPU is busy when a job of the service has it, or a
  // live record of the host's table holds it (a direct `ddpx run` or `ddpx shell`, another
  // service's job).
  std::set<int> used;
  for (JobState state : {JobState::kRunning, JobState::kStopping})
    for (const Job& other : store_.jobs_in(state))
      used.insert(other.slots.begin(), other.slots.end());
  std::vector<int> chosen;
  auto choose = [&](const std::vector<launch::JobRecord>& live) {
    std::set<std::string> held;
    for (const launch::JobRecord& r : live) held.insert(r.devices.begin(), r.devices.end());
    chosen.clear();
    std::vector<std::string> devices;
    for (int i = 0; i < slots() && static_cast<int>(chosen.size()) < job.workers; ++i) {
      int slot = options_.gpus.empty() ? i : options_.gpus[static_cast<size_t>(i)];
      if (used.count(slot)) continue;
      if (!options_.gpus.empty()) {
        const std::string& id = gpu_ids_.at(slot);
        if (held.count(id)) continue;
        devices.push_back(id);
      }
      chosen.push_back(slot);
    }
    if (static_cast<int>(chosen.size()) < job.workers) throw NoRoom{};
    return devices;
  };
  launch::JobRecord draft;
  draft.id = job_name(job.id);
  draft.kind = launch::kStartingKind;
  draft.workers = job.workers;
  for (const std::string& word : job.command)
    draft.command += (draft.command.empty() ? "" : " ") + word;
  std::optional<launch::HostReservation> hold;
  try {
    hold.emplace(launch::HostReservation::acquire(std::move(draft), choose));
  } catch (const NoRoom&) {
    return false;  // waits at the head of the queue
  } catch (const Error& e) {
    // svc<ID> is live in the table: another service's job on this host has the same name.
    if (e.kind() == ErrorKind::kUsage) return false;  // it waits until that one ends
    throw;
  }
  // Ports are locked host-wide by whoever picks them (port.h): direct launches skip them too.
  std::vector<launch::PortReservation> ports;
  for (int i = 0; i <= job.extra_ports; ++i) ports.push_back(launch::PortReservation::pick());
  job.slots = chosen;
  launch(job, std::move(ports), std::move(*hold));
  return true;
}

void LocalPlacement::refresh() {
  // Reap the launchers this service started, each by its pid (other threads wait for the
  // programs they run), so that none is left a zombie. Their records tell how they ended; the
  // status is kept for a job still running here, which covers a launcher stopped before it
  // wrote any record.
  std::set<int> active;
  for (JobState state : {JobState::kRunning, JobState::kStopping})
    for (const Job& job : store_.jobs_in(state)) active.insert(job.pid);
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    pid_t reaped = ::waitpid(*it, &status, WNOHANG);
    if (reaped == 0) {
      ++it;
      continue;
    }
    if (reaped == *it && active.count(*it))
      exited_[*it] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    it = children_.erase(it);
  }
  refresh_running();
}

void LocalPlacement::refresh_running() {
  std::vector<launch::JobRecord> records = launch::read_jobs(launch::jobs_dir());
  // Jobs started by a ddpx that kept its launchers' records under STATE/jobs.
  std::string own = options_.state_dir + "/jobs";
  if (std::filesystem::is_directory(own)) {
    for (launch::JobRecord& r : launch::read_jobs(own)) records.push_back(std::move(r));
  }
  for (JobState state : {JobState::kRunning, JobState::kStopping}) {
    for (Job& job : store_.jobs_in(state)) {
      // Slurm's (a service with --scheduler slurm on this folder before): not this host's.
      if (!job.slurm_id.empty()) continue;
      const launch::JobRecord* record =
          record_of(records, job, options_.state_dir, holds_.count(job.id) > 0);
      bool exited = exited_.count(job.pid) > 0;
      if (record && record->state == launch::JobState::kLive) {
        if (record->kind == launch::kStartingKind) {
          if (!exited) continue;  // the launcher is starting: it takes the record over
          record = nullptr;       // it ended before it could
        } else {
          holds_.erase(job.id);  // the launcher's own record holds the devices now
          if (job.log_dir.empty()) {
            job.log_dir = record->log_dir;
            store_.update_job(job);
          }
          continue;
        }
      }
      // Not running: ended (its code recorded), lost (killed), or never came up.
      bool started = record != nullptr && record->kind != launch::kStartingKind;
      bool alive = job.pid > 0 && !exited && ::kill(job.pid, 0) == 0;
      if (!started && alive && std::time(nullptr) - job.started < 30) continue;  // starting
      job.state = JobState::kEnded;
      job.ended = std::time(nullptr);
      if (started && record->state == launch::JobState::kEnded) {
        job.exit_code = record->exit_code;
        job.log_dir = record->log_dir;
      } else if (exited) {
        job.exit_code = exited_[job.pid];
      } else {
        job.exit_code = 137;  // gone without a word while the service was down: as SIGKILL
      }
      exited_.erase(job.pid);
      job.pid = 0;
      ports_.erase(job.id);
      holds_.erase(job.id);
      store_.update_job(job);
    }
  }
}

void LocalPlacement::stop(const Job& job) { ::kill(job.pid, SIGTERM); }

void LocalPlacement::snapshot(const Job& job) {
  DDPX_CHECK(::kill(job.pid, SIGUSR1) == 0, ErrorKind::kIo, "cannot signal job {} (pid {}): {}",
             job.id, job.pid, std::strerror(errno));
}

void LocalPlacement::launch(Job& job, std::vector<launch::PortReservation> ports,
                            launch::HostReservation hold) {
  std::string devices = "none";  // CPU slots: no GPU
  if (!options_.gpus.empty()) {
    devices.clear();
    for (int slot : job.slots) devices += (devices.empty() ? "" : ",") + gpu_ids_.at(slot);
  }
  job.ports.clear();
  for (auto& p : ports) {
    job.ports.push_back(p.port());
    p.release_probe();
  }
  std::vector<std::string> argv = {options_.ddpx_path,
                                   "run",
                                   std::to_string(job.workers),
                                   "--job_name",
                                   job_name(job.id),
                                   "--log_dir",
                                   options_.state_dir + "/logs",
                                   "--master_port",
                                   std::to_string(job.ports[0]),
                                   "--gpus",
                                   devices,
                                   "--tee",
                                   "none",
                                   "--"};
  argv.insert(argv.end(), job.command.begin(), job.command.end());
  if (is_train_command(job.command)) {
    argv.push_back("--save_dir");
    argv.push_back(job_checkpoints_dir(options_.state_dir, job.id));
  }
  std::string extra;
  for (size_t i = 1; i < job.ports.size(); ++i)
    extra += (extra.empty() ? "" : ",") + std::to_string(job.ports[i]);

  // The job outlives the service in a session of its own, with none of the service's
  // descriptors (its listening socket, clients' connections, the database) and none of its
  // signal handlers. Snapshot requests that come before the launcher installs its handlers are
  // dropped, not fatal (their default action).
  SpawnSpec spec;
  spec.argv = std::move(argv);
  // The launcher takes over the record held for it (and reads the host's table, as the service
  // does); it is nobody's `ddpx shell` job even if the service was started in one.
  spec.env = {{"DDPX_RESERVATION", hold.record().id},
              {"DDPX_JOBS_DIR", launch::jobs_dir()},
              {"DDPX_JOB", ""},
              {"DDPX_JOB_PORTS", extra}};  // the job's own services bind these
  spec.stdout_to = ChildOutput::kFile;
  spec.stderr_to = ChildOutput::kStdout;
  spec.output_file = fmt::format("{}/logs/svc{}.console", options_.state_dir, job.id);
  spec.group = ChildGroup::kNewSession;
  spec.all_signals_default = true;
  spec.ignored_signals = {SIGUSR1, SIGUSR2};
  spec.blocked_signals = std::vector<int>{};
  pid_t pid = -1;
  try {
    pid = spawn(spec).pid;
  } catch (const Error& e) {
    fail(e.kind(), "starting job {}: {}", job.id, e.what());
  }
  children_.insert(pid);
  job.pid = pid;
  job.state = JobState::kRunning;
  job.started = std::time(nullptr);
  ports_[job.id] = std::move(ports);
  holds_.emplace(job.id, std::move(hold));
  store_.update_job(job);
}

}  // namespace ddpx::serve
