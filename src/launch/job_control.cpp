#include "launch/job_control.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "launch/reservation.h"
#include "launch/worker_output.h"

namespace ddpx::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFollowInterval = std::chrono::milliseconds(200);

std::string local_time(std::int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm local{};
  ::localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string state_text(const JobRecord& r) {
  if (r.state == JobState::kEnded) return fmt::format("ended ({})", r.exit_code);
  return job_state_name(r.state);
}

bool is_running(const std::string& id) {
  for (const JobRecord& r : live_jobs(jobs_dir(false))) {
    if (r.id == id) return true;
  }
  return false;
}

// Copies what `in` has beyond its position to stdout.
void copy_new_bytes(std::ifstream& in) {
  char buffer[65536];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    write_all(STDOUT_FILENO, std::string(buffer, static_cast<size_t>(in.gcount())));
  }
  in.clear();  // at end of file for now; more may come
}

}  // namespace

std::string format_jobs(const std::vector<JobRecord>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "KIND", "USER", "PID", "DEVICES", "PORT", "STARTED", "STATE", "LOGS"}};
  for (const JobRecord& r : jobs) {
    std::string devices = r.devices.empty() ? fmt::format("cpu x{}", r.workers)
                                            : fmt::format("gpu {}", fmt::join(r.devices, ","));
    rows.push_back({r.id, r.kind, r.user, std::to_string(r.pid), devices, std::to_string(r.port),
                    local_time(r.started), state_text(r), r.log_dir.empty() ? "-" : r.log_dir});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], width[i]) : row[i];
    }
    out += line + "\n";
  }
  return out;
}

std::string jobs_json(const std::vector<JobRecord>& jobs) {
  nlohmann::json array = nlohmann::json::array();
  for (const JobRecord& r : jobs) {
    nlohmann::json j = nlohmann::json::parse(to_json(r));
    j["state"] = job_state_name(r.state);
    array.push_back(std::move(j));
  }
  return array.dump(2) + "\n";
}

void show_logs(const std::string& id, int rank, bool follow) {
  JobRecord job = find_job(jobs_dir(false), id);
  DDPX_CHECK(!job.log_dir.empty(), ErrorKind::kUsage,
             "job {} is a `ddpx shell` reservation and has no logs; the programs run inside it "
             "write their own",
             id);
  std::string path = fmt::format("{}/rank{}.log", job.log_dir, rank);
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kUsage,
             "job {} has no log {} (its ranks on this host are in {}/); give --rank of one of them",
             id, path, job.log_dir);
  copy_new_bytes(in);
  if (!follow) return;
  while (is_running(id)) {
    std::this_thread::sleep_for(kFollowInterval);
    copy_new_bytes(in);
  }
  copy_new_bytes(in);  // what the last moments wrote
}

namespace {

// The job, when it runs and this user may signal it (`verb`: what they asked, for the error).
JobRecord signallable_job(const std::string& dir, const std::string& id, const char* verb) {
  JobRecord job = find_job(dir, id);
  DDPX_CHECK(job.state == JobState::kLive, ErrorKind::kUsage, "job {} is not running (it is {})",
             id, state_text(job));
  // A job service's hold for a job whose launcher is starting: its pid is the service's.
  DDPX_CHECK(job.kind != kStartingKind, ErrorKind::kUsage,
             "job {} is starting (its launcher takes over within a second); {} it again then, "
             "or through its job service",
             id, verb);
  int me = static_cast<int>(::getuid());
  DDPX_CHECK(me == 0 || me == job.uid, ErrorKind::kUsage,
             "job {} belongs to user {}; only its owner or root can {} it", id, job.user, verb);
  return job;
}

}  // namespace

std::string snapshot_refusal(const std::vector<std::string>& command) {
  auto word = command.begin();
  // `ddpx run N -- /path/to/ddpx train ...` runs the same trainer as `-- train ...`.
  if (word != command.end() && (std::filesystem::path(*word).filename() == "ddpx" ||
                                std::filesystem::path(*word).filename() == "ddpx-torch"))
    ++word;
  if (word == command.end() || *word != "train")
    return fmt::format(
        "runs `{}`, not `ddpx train`: only `ddpx train --save_dir DIR` writes snapshots",
        word == command.end() ? std::string() : *word);
  bool save_dir = std::any_of(word, command.end(), [](const std::string& w) {
    return w == "--save_dir" || (w.rfind("--save_dir=", 0) == 0 && w.size() > 11);
  });
  if (!save_dir)
    return "runs `ddpx train` without --save_dir: it has nowhere to write a snapshot; start it "
           "with --save_dir DIR";
  return "";
}

void snapshot_job(const std::string& id, bool then_stop) {
  JobRecord job = signallable_job(jobs_dir(false), id, "snapshot");
  DDPX_CHECK(job.kind == "run", ErrorKind::kUsage,
             "job {} is a `ddpx shell`; snapshot the `ddpx run` job started inside it", id);
  std::vector<std::string> words;
  std::istringstream line(job.command);
  for (std::string w; line >> w;) words.push_back(w);
  std::string refusal = snapshot_refusal(words);
  DDPX_CHECK(refusal.empty(), ErrorKind::kUsage, "job {} {}", id, refusal);
  int signal = then_stop ? SIGUSR2 : SIGUSR1;
  if (::kill(job.pid, signal) != 0)
    fail(ErrorKind::kIo, "cannot signal job {} (pid {}): {}", id, job.pid, std::strerror(errno));
}

int stop_job(const std::string& id, double timeout_s) {
  std::string dir = jobs_dir(false);
  JobRecord job = signallable_job(dir, id, "stop");
  if (::kill(job.pid, SIGTERM) != 0) {
    fail(ErrorKind::kIo, "cannot signal job {} (pid {}): {}", id, job.pid, std::strerror(errno));
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  while (is_running(id)) {
    DDPX_CHECK(Clock::now() < deadline, ErrorKind::kIo,
               "job {} (pid {}) is still running {} s after SIGTERM; `ddpx stop {}` again "
               "sends a second SIGTERM, which makes the launcher SIGKILL its workers",
               id, job.pid, timeout_s, id);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  JobRecord ended = find_job(dir, id);
  return ended.state == JobState::kEnded ? ended.exit_code : 1;
}

}  // namespace ddpx::launch
