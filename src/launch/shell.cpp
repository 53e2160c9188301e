#include "launch/shell.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include "core/env.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "launch/host.h"
#include "launch/port.h"
#include "launch/reservation.h"
#include "launch/worker_output.h"

namespace ddpx::launch {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The reserved GPUs: the given list (checked free) or the first free ones.
std::vector<std::string> choose(const ShellOptions& o, const GpuInfo& gpus,
                                const std::vector<JobRecord>& live) {
  if (o.gpus == "none" || (o.gpus.empty() && gpus.vendor == GpuVendor::kNone)) return {};
  DDPX_CHECK(gpus.vendor != GpuVendor::kNone, ErrorKind::kUsage,
             "--gpus {}: this machine has no GPU; drop --gpus to reserve CPU workers", o.gpus);
  if (!o.gpus.empty()) {
    std::vector<std::string> ids = split(o.gpus);
    check_devices_free(ids, live);
    return ids;
  }
  std::vector<std::string> free = free_devices(gpus.ids, o.workers, live);
  DDPX_CHECK(static_cast<int>(free.size()) >= o.workers, ErrorKind::kUsage,
             "ddpx shell {}: only {} GPU(s) visible; reserve at most {}", o.workers, free.size(),
             free.size());
  free.resize(static_cast<size_t>(o.workers));
  return free;
}

}  // namespace

int run_shell(const ShellOptions& o) {
  DDPX_CHECK(o.workers >= 1, ErrorKind::kUsage, "ddpx shell {}: N must be at least 1", o.workers);
  DDPX_CHECK(!env::get("DDPX_JOB"), ErrorKind::kUsage,
             "already inside ddpx job {}; leave that shell first (exit)",
             env::get_or("DDPX_JOB", ""));
  GpuInfo gpus = detect_gpus();
  std::vector<std::string> command = o.command;
  if (command.empty()) command = {env::get_or("SHELL", "/bin/sh")};
  std::string program = find_program(command.front());

  PortReservation port = PortReservation::pick();
  JobRecord draft;
  draft.kind = "shell";
  draft.device_variable =
      gpus.vendor == GpuVendor::kNone ? "" : visible_devices_variable(gpus.vendor);
  draft.port = port.port();
  draft.workers = o.workers;
  draft.command = fmt::format("{}", fmt::join(command, " "));
  HostReservation held = HostReservation::acquire(
      std::move(draft), [&](const std::vector<JobRecord>& live) { return choose(o, gpus, live); });
  port.release_probe();  // the programs in the shell bind it; the port's lock stays with us
  const JobRecord& job = held.record();

  std::vector<std::pair<std::string, std::string>> env = {
      {"DDPX_JOB", job.id},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(job.port)},
      {"PET_MASTER_ADDR", "127.0.0.1"},
      {"PET_MASTER_PORT", std::to_string(job.port)},
      {"PET_NPROC_PER_NODE", std::to_string(o.workers)},
  };
  if (!job.device_variable.empty())
    env.emplace_back(job.device_variable, fmt::format("{}", fmt::join(job.devices, ",")));
  write_all(STDERR_FILENO,
            fmt::format("ddpx shell: job {}: {} worker(s), {}, port {}; `ddpx run N -- ...` "
                        "and torchrun use them; exit the shell to end the reservation\n",
                        job.id, o.workers,
                        job.devices.empty() ? std::string("CPU")
                                            : fmt::format("GPU {}", fmt::join(job.devices, ",")),
                        job.port));

  // Like system(): the shell owns the terminal's signals; this process only waits.
  struct sigaction ignore {
  }, old_int{}, old_quit{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGQUIT, &ignore, &old_quit);
  SpawnSpec spec;
  spec.program = program;
  spec.argv = command;
  spec.env = env;
  spec.stdin_null = false;
  spec.close_other_fds = false;
  // The shell gets SIGINT and SIGQUIT as this process had them, unless they were ignored.
  if (old_int.sa_handler != SIG_IGN) spec.default_signals.push_back(SIGINT);
  if (old_quit.sa_handler != SIG_IGN) spec.default_signals.push_back(SIGQUIT);
  auto restore = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGQUIT, &old_quit, nullptr);
  };
  int status = 0;
  try {
    status = wait_child(spawn(spec).pid);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  int code = exit_code_of(status);
  held.finish(code);
  return code;
}

}  // namespace ddpx::launch
