#include "launch/job_record.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/env.h"
#include "core/error.h"

namespace ddpx::launch {
namespace {

namespace fs = std::filesystem;
constexpr const char* kDefaultDir = "/tmp/ddpx-jobs";
constexpr std::int64_t kKeepEndedSeconds = 7 * 24 * 3600;

// Locked by a live job: a shared lock cannot be taken while the job holds its exclusive one.
bool is_locked(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool locked = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return locked;
}

}  // namespace

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kLive:
      return "running";
    case JobState::kEnded:
      return "ended";
    case JobState::kLost:
      return "lost";
  }
  return "?";
}

std::string to_json(const JobRecord& r) {
  nlohmann::json j = {
      {"id", r.id},
      {"kind", r.kind},
      {"user", r.user},
      {"uid", r.uid},
      {"pid", r.pid},
      {"devices", r.devices},
      {"device_variable", r.device_variable},
      {"port", r.port},
      {"workers", r.workers},
      {"started", r.started},
      {"log_dir", r.log_dir},
      {"command", r.command},
      {"ended", r.ended},
      {"exit_code", r.exit_code},
  };
  return j.dump(2) + "\n";
}

JobRecord job_from_json(const std::string& text, const std::string& path) {
  try {
    auto j = nlohmann::json::parse(text);
    JobRecord r;
    r.id = j.at("id").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.user = j.at("user").get<std::string>();
    r.uid = j.at("uid").get<int>();
    r.pid = j.at("pid").get<int>();
    r.devices = j.at("devices").get<std::vector<std::string>>();
    r.device_variable = j.at("device_variable").get<std::string>();
    r.port = j.at("port").get<int>();
    r.workers = j.at("workers").get<int>();
    r.started = j.at("started").get<std::int64_t>();
    r.log_dir = j.at("log_dir").get<std::string>();
    r.command = j.at("command").get<std::string>();
    r.ended = j.at("ended").get<std::int64_t>();
    r.exit_code = j.at("exit_code").get<int>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kIo, "{} is not a ddpx job record ({}); delete it", path, e.what());
  }
}

std::string jobs_dir(bool for_writing) {
  std::string dir = env::get_or("DDPX_JOBS_DIR", kDefaultDir);
  DDPX_CHECK(!dir.empty(), ErrorKind::kUsage, "DDPX_JOBS_DIR is empty; unset it or name a folder");
  if (!for_writing) return dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    // Shared by every user like /tmp: anyone may add a record, only its owner remove it.
    if (!ec && dir == kDefaultDir) ::chmod(dir.c_str(), 01777);
  }
  DDPX_CHECK(!ec && ::access(dir.c_str(), W_OK | X_OK) == 0, ErrorKind::kIo,
             "the job folder {} cannot be written ({}); set DDPX_JOBS_DIR to a writable folder",
             dir, ec ? ec.message() : std::strerror(errno));
  return dir;
}

std::vector<JobRecord> read_jobs(const std::string& dir) {
  std::vector<JobRecord> jobs;
  std::error_code ec;
  std::int64_t now = std::time(nullptr);
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || entry.path().extension() != ".json") continue;
    std::string path = entry.path().string();
    JobRecord r;
    try {
      r = job_from_json(read_file(path), path);
    } catch (const Error&) {
      continue;  // being replaced this instant, or not ours: not a job
    }
    if (is_locked(path)) {
      r.state = JobState::kLive;
    } else {
      r.state = r.ended > 0 ? JobState::kEnded : JobState::kLost;
      std::int64_t last = r.ended > 0 ? r.ended : r.started;
      if (now - last > kKeepEndedSeconds) {
        fs::remove(path, ec);
        continue;
      }
    }
    jobs.push_back(std::move(r));
  }
  std::sort(jobs.begin(), jobs.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.started != b.started ? a.started < b.started : a.id < b.id;
  });
  return jobs;
}

std::vector<JobRecord> live_jobs(const std::string& dir) {
  std::vector<JobRecord> jobs = read_jobs(dir);
  jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                            [](const JobRecord& r) { return r.state != JobState::kLive; }),
             jobs.end());
  return jobs;
}

JobRecord find_job(const std::string& dir, const std::string& id) {
  for (JobRecord& r : read_jobs(dir)) {
    if (r.id == id) return r;
  }
  fail(ErrorKind::kUsage, "no job '{}' on this host (in {}); `ddpx jobs --all` lists them", id,
       dir);
}

std::string user_name(int uid) {
  struct passwd* pw = ::getpwuid(static_cast<uid_t>(uid));
  return pw ? pw->pw_name : std::to_string(uid);
}

}  // namespace ddpx::launch
