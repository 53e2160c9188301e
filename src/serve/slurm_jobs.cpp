#include "serve/slurm_jobs.h"

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/subprocess.h"
#include "launch/host.h"

namespace ddpx::serve {
namespace {

// The value of `Key=` in a one-line record (values hold no spaces, except the last fields'
// which ddpx does not read).
std::string field(const std::string& line, const std::string& key) {
  std::string needle = key + "=";
  for (size_t at = line.find(needle); at != std::string::npos; at = line.find(needle, at + 1)) {
    if (at != 0 && line[at - 1] != ' ') continue;
    size_t start = at + needle.size();
    return line.substr(start, line.find(' ', start) - start);
  }
  return "";
}

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

std::pair<std::string, SlurmStatus> parse_scontrol_job(const std::string& line) {
  std::string id = field(line, "JobId");
  SlurmStatus s;
  s.state = field(line, "JobState");
  DDPX_CHECK(!id.empty() && !s.state.empty(), ErrorKind::kIo,
             "scontrol show job: expected JobId= and JobState= in '{}'", line.substr(0, 200));
  s.reason = field(line, "Reason");
  s.phase = phase_of(s.state);
  static const std::regex code(R"(^(\d+):(\d+)$)");
  std::smatch m;
  std::string exit_code = field(line, "ExitCode");
  if (std::regex_match(exit_code, m, code)) {
    int status = std::stoi(m[1]), signal = std::stoi(m[2]);
    s.exit_code = signal > 0 ? 128 + signal : status;
  }
  // An end Slurm chose with no code of the job's own: a cancel reads as SIGTERM (as `ddpx
  // stop` does), a time limit as timeout(1)'s 124, any other failure as 1.
  if (s.phase == SlurmStatus::Phase::kEnded && s.exit_code == 0 && s.state != "COMPLETED")
    s.exit_code = s.state == "CANCELLED" ? 143 : s.state == "TIMEOUT" ? 124 : 1;
  return {id, s};
}

std::map<std::string, SlurmStatus> slurm_jobs(const std::vector<std::string>& ids) {
  std::map<std::string, SlurmStatus> out;
  if (ids.empty()) return out;
  ProgramOutput run = run_program({"scontrol", "show", "job", "--oneliner"}, 30);
  DDPX_CHECK(run.exit_code == 0, ErrorKind::kIo, "scontrol show job failed: {}", run.output);
  std::set<std::string> wanted(ids.begin(), ids.end());
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("JobId=", 0) != 0) continue;  // "No jobs in the system"
    auto [id, status] = parse_scontrol_job(line);
    if (wanted.count(id)) out[id] = status;
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
  for (const char* program : {"sbatch", "scontrol", "scancel"}) {
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
