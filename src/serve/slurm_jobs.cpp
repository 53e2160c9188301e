#include "serve/slurm_jobs.h"

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/subprocess.h"
#include "launch/host.h"

namespace ddpx::serve {
namespace {

SlurmStatus::Phase phase_of(const std::string& state) {
  static const std::set<std::string> pending = {"PENDING", "REQUEUED", "REQUEUE_HOLD",
                                                "REQUEUE_FED", "RESV_DEL_HOLD"};
  static const std::set<std::string> running = {"RUNNING",   "CONFIGURING", "COMPLETING",
                                                "SUSPENDED", "STOPPED",     "RESIZING",
                                                "SIGNALING", "STAGE_OUT",   "POWER_UP_NODE"};
  if (pending.count(state)) return SlurmStatus::Phase::kPending;
  if (running.count(state)) return SlurmStatus::Phase::kRunning;
  return SlurmStatus::Phase::kEnded;  // COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
}

}  // namespace

std::pair<std::string, SlurmStatus> parse_squeue_job(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; std::getline(in, f, '|');) fields.push_back(f);
  static const std::regex number(R"(^\d+$)");
  DDPX_CHECK(fields.size() >= 4 && !fields[0].empty() && !fields[1].empty() &&
                 std::regex_match(fields[3], number),
             ErrorKind::kIo, "squeue: expected JOBID|STATE|REASON|EXIT_CODE|, got '{}'",
             line.substr(0, 200));
  SlurmStatus s;
  s.state = fields[1];
  s.reason = fields[2];
  s.phase = phase_of(s.state);
  // exit_code is the batch shell's wait status: a signal in the low 7 bits, else the code.
  int status = std::stoi(fields[3]);
  s.exit_code = (status & 0x7f) != 0 ? 128 + (status & 0x7f) : (status >> 8) & 0xff;
  // An end Slurm chose with no code of the job's own: a cancel reads as SIGTERM (as `ddpx
  // stop` does), a time limit as timeout(1)'s 124, any other failure as 1.
  if (s.phase == SlurmStatus::Phase::kEnded && s.exit_code == 0 && s.state != "COMPLETED")
    s.exit_code = s.state == "CANCELLED" ? 143 : s.state == "TIMEOUT" ? 124 : 1;
  return {fields[0], s};
}

std::map<std::string, SlurmStatus> slurm_jobs(const std::vector<std::string>& ids) {
  std::map<std::string, SlurmStatus> out;
  if (ids.empty()) return out;
  std::string list;
  for (const std::string& id : ids) list += (list.empty() ? "" : ",") + id;
  ProgramOutput run = run_program({"squeue", "--noheader", "--states=all", "--jobs=" + list,
                                   "--Format=JobID:|,State:|,Reason:|,exit_code:|"},
                                  30);
  // Every id forgotten (MinJobAge after their end): squeue refuses the list.
  if (run.exit_code != 0 && run.output.find("Invalid job id") != std::string::npos) return out;
  DDPX_CHECK(run.exit_code == 0, ErrorKind::kIo, "squeue failed: {}", run.output);
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    out.insert(parse_squeue_job(line));
  }
  return out;
}

void slurm_cancel(const std::string& id, const std::string& signal) {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(id);
  ProgramOutput run = run_program(argv, 30);
  DDPX_CHECK(run.exit_code == 0 && run.output.find("error") == std::string::npos, ErrorKind::kIo,
             "scancel {}{} failed: {}", signal.empty() ? "" : "--signal=" + signal + " ", id,
             run.output);
}

void require_slurm_programs() {
  for (const char* program : {"sbatch", "squeue", "scancel"}) {
    try {
      launch::find_program(program);
    } catch (const Error&) {
      fail(ErrorKind::kUsage,
           "--scheduler slurm: {} is not on PATH; install Slurm's client tools (Debian: "
           "slurm-client) on this node, or use --scheduler local",
           program);
    }
  }
}

}  // namespace ddpx::serve
