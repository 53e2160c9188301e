#include "launch/launcher.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>

#include "core/env.h"
#include "core/error.h"
#include "launch/attempt.h"
#include "launch/job_record.h"
#include "launch/node_rendezvous.h"
#include "launch/plan.h"
#include "launch/port.h"
#include "launch/reservation.h"
#include "launch/signal_pipe.h"
#include "launch/worker_output.h"

namespace ddpx::launch {
namespace {

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &local);
  return text;
}

std::string log_dir_path(const LaunchOptions& o, const std::string& job_id) {
  return std::filesystem::absolute(o.log_dir + "/" + timestamp() + "_" + job_id).string();
}

void create_log_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DDPX_CHECK(!ec, ErrorKind::kIo, "cannot create the log folder {}: {}; choose another --log_dir",
             dir, ec.message());
}

std::string command_line(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
  return line;
}

// The live `ddpx shell` reservation this launcher runs inside ($DDPX_JOB), if any: its
// devices are already the visible ones and its port is the job's.
std::optional<JobRecord> enclosing_shell() {
  auto id = env::get("DDPX_JOB");
  if (!id || id->empty()) return std::nullopt;
  for (JobRecord& r : live_jobs(jobs_dir(/*for_writing=*/false))) {
    if (r.id == *id && r.kind == "shell") return r;
  }
  return std::nullopt;
}

// Creates the log folder and opens every worker's rankK.log in it.
void open_logs(const LaunchOptions& options, const JobPlan& plan, const std::string& log_dir,
               std::vector<WorkerOutput>& outputs) {
  create_log_dir(log_dir);
  outputs.clear();
  for (const WorkerSpec& w : plan.workers) {
    bool console = options.tee == Tee::kAll || (options.tee == Tee::kFirst && w.local_rank == 0);
    std::string prefix = options.tee == Tee::kAll ? fmt::format("[rank {}] ", w.global_rank) : "";
    outputs.emplace_back(fmt::format("{}/rank{}.log", log_dir, w.global_rank), console, prefix);
  }
}

// Starts the plan's workers (again after a failure, up to --max_restarts) and returns the
// job's exit code.
int supervise(const LaunchOptions& options, JobPlan& plan, const std::string& log_dir,
              std::vector<WorkerOutput>& outputs, std::optional<PortReservation>& port_hold) {
  SignalPipe signals;
  if (port_hold) port_hold->release_probe();  // rank 0's TCPStore binds the port next
  for (int restart = 0;; ++restart) {
    set_restart_count(plan, restart);
    if (options.nnodes == 1)
      set_store_file(plan, fmt::format("{}/rendezvous.{}", log_dir, restart));
    std::string trace_dir = fmt::format("{}/trace.{}", log_dir, restart);
    set_trace_dir(plan, trace_dir);
    AttemptResult result = run_attempt(options, plan, outputs, signals.fd(), trace_dir);
    if (result.outcome == Outcome::kSuccess) return 0;
    if (result.outcome == Outcome::kWorkerFailed && restart < options.max_restarts) {
      say(fmt::format("restarting all workers (restart {} of {})", restart + 1,
                      options.max_restarts));
      continue;
    }
    say(fmt::format("stopped all workers; exiting with code {}", result.exit_code));
    return result.exit_code;
  }
}

}  // namespace

int run_job(const LaunchOptions& given) {
  validate(given);
  LaunchOptions options = given;
  if (options.nnodes == 1) options.node_rank = 0;
  if (options.node_rank < 0 && !options.dry_run) {
    say(fmt::format("node rank: joining the node rendezvous at {}:{} (--nnodes {})",
                    options.master_addr, options.master_port,
                    options.nnodes == 0 ? std::string("auto") : std::to_string(options.nnodes)));
    NodeAssignment a = join_node_rendezvous(NodeRendezvousOptions{
        options.master_addr, options.master_port, options.nnodes, options.nproc_per_node,
        options.rdzv_timeout_s, options.rdzv_last_call_s});
    options.node_rank = a.node_rank;
    options.nnodes = a.nnodes;
    say(fmt::format("node rank {} of {} nodes, assigned at rendezvous", a.node_rank, a.nnodes));
  }
  if (options.nnodes > 1 && options.node_rank >= 0)
    check_master_addr(options.master_addr, options.node_rank == 0);
  HostInfo host = probe_host();
  std::optional<JobRecord> shell = enclosing_shell();
  std::optional<PortReservation> port_hold;
  int port = options.master_port;
  if (port == 0 && shell) port = shell->port;
  if (port == 0) {
    port_hold.emplace(PortReservation::pick());
    port = port_hold->port();
  }
  if (options.dry_run) {
    write_all(STDOUT_FILENO, describe(make_plan(options, host, port)));
    return 0;
  }

  // Reserve this node's GPUs host-wide (reservation.h), unless a `ddpx shell` already has.
  JobPlan plan;
  std::string job_id = options.job_name.empty() ? new_job_id() : options.job_name;
  std::string log_dir = log_dir_path(options, job_id);
  std::vector<WorkerOutput> outputs;
  auto choose_devices = [&](const std::vector<JobRecord>& live) {
    HostInfo usable = host;
    if (options.gpus.empty() && host.gpus.vendor != GpuVendor::kNone)
      usable.gpus.ids = free_devices(host.gpus.ids, options.nproc_per_node, live);
    plan = make_plan(options, usable, port);
    if (!options.gpus.empty()) check_devices_free(plan.gpu_ids, live);
    // Before the record is published: whoever sees the job in `ddpx jobs` finds its logs.
    open_logs(options, plan, log_dir, outputs);
    return plan.gpu_ids;
  };
  std::optional<HostReservation> reservation;
  // A job service's job: the service holds its devices under this id until we take them over.
  std::string takes_over = env::get_or("DDPX_RESERVATION", "");
  ::unsetenv("DDPX_RESERVATION");  // not the workers': a `ddpx run` of theirs is a job of its own
  if (shell) {
    plan = make_plan(options, host, port);
    open_logs(options, plan, log_dir, outputs);
  } else {
    JobRecord draft;
    // Each node of a job has its own record: tests run several nodes on one host.
    draft.id = options.nnodes == 1 ? job_id : fmt::format("{}-node{}", job_id, options.node_rank);
    draft.kind = "run";
    draft.device_variable =
        host.gpus.vendor == GpuVendor::kNone ? "" : visible_devices_variable(host.gpus.vendor);
    draft.port = port;
    draft.workers = options.nproc_per_node;
    draft.log_dir = log_dir;
    draft.command = command_line(options.command);
    reservation.emplace(HostReservation::acquire(std::move(draft), choose_devices, takes_over));
  }
  constexpr char start[] =
      "job {}: {} worker(s) on node {} of {} (world size {}), master {}:{}, {} thread(s) each, "
      "logs in {}/";
  say(fmt::format(start, job_id, plan.workers.size(), options.node_rank, options.nnodes,
                  plan.world_size, plan.master_addr, plan.master_port, plan.threads_per_worker,
                  log_dir));
  if (auto note = oversubscription_note(plan, host); !note.empty()) say(note);
  int exit_code = supervise(options, plan, log_dir, outputs, port_hold);
  if (reservation) reservation->finish(exit_code);
  return exit_code;
}

}  // namespace ddpx::launch
