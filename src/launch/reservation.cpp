#include "launch/reservation.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>
#include <set>

#include "core/error.h"

namespace ddpx::launch {
namespace {

// Holds the folder's lock for the scope: the read-choose-write of acquire() is atomic among
// every ddpx process on the host.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir) {
    std::string path = dir + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // another user's lock file
    DDPX_CHECK(fd_ >= 0, ErrorKind::kIo,
               "cannot open {}: {}; set DDPX_JOBS_DIR to a writable folder", path,
               std::strerror(errno));
    ::fchmod(fd_, 0666);  // best effort: other users lock it too
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FolderLock() { ::close(fd_); }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

std::string holders(const std::vector<std::string>& devices, const std::vector<JobRecord>& live) {
  std::string out;
  for (const JobRecord& r : live) {
    for (const std::string& d : devices) {
      if (std::find(r.devices.begin(), r.devices.end(), d) == r.devices.end()) continue;
      if (!out.empty()) out += ", ";
      out += fmt::format("GPU {} by job {} (user {}, pid {})", d, r.id, r.user, r.pid);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> free_devices(const std::vector<std::string>& visible, int needed,
                                      const std::vector<JobRecord>& live) {
  std::set<std::string> held;
  for (const JobRecord& r : live) held.insert(r.devices.begin(), r.devices.end());
  std::vector<std::string> free;
  for (const std::string& d : visible) {
    if (!held.count(d)) free.push_back(d);
  }
  DDPX_CHECK(
      static_cast<int>(free.size()) >= needed || free.size() == visible.size(), ErrorKind::kUsage,
      "{} worker(s) need {} GPU(s) but only {} of {} are free: {} ({}); wait for them "
      "(`ddpx jobs` lists the jobs) or ask for fewer",
      needed, needed, free.size(), visible.size(), holders(visible, live), "reserved host-wide");
  return free;
}

void check_devices_free(const std::vector<std::string>& requested,
                        const std::vector<JobRecord>& live) {
  std::string taken = holders(requested, live);
  DDPX_CHECK(taken.empty(), ErrorKind::kUsage,
             "--gpus {}: reserved: {}; pick other GPUs or wait (`ddpx jobs` lists the jobs)",
             fmt::join(requested, ","), taken);
}

std::string new_job_id() {
  std::random_device entropy;
  return fmt::format("{:06x}", (entropy() ^ static_cast<unsigned>(::getpid())) & 0xffffff);
}

HostReservation HostReservation::acquire(JobRecord draft, const DeviceChooser& choose,
                                         const std::string& takes_over) {
  std::string dir = jobs_dir();
  FolderLock lock(dir);
  std::vector<JobRecord> live = live_jobs(dir);
  if (!takes_over.empty()) {
    DDPX_CHECK(draft.id == takes_over, ErrorKind::kUsage,
               "DDPX_RESERVATION={} but the job is named '{}'; a job takes over only its own "
               "reservation (unset DDPX_RESERVATION)",
               takes_over, draft.id);
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const JobRecord& r) {
                                return r.id == takes_over && r.kind == kStartingKind;
                              }),
               live.end());
  }
  auto live_id = [&](const std::string& id) {
    return std::any_of(live.begin(), live.end(), [&](const JobRecord& r) { return r.id == id; });
  };
  if (draft.id.empty()) {
    do draft.id = new_job_id();
    while (live_id(draft.id));
  } else {
    DDPX_CHECK(!live_id(draft.id), ErrorKind::kUsage,
               "--job_name {}: a running job on this host has that name (`ddpx jobs`); choose "
               "another",
               draft.id);
  }
  draft.devices = choose(live);
  draft.uid = static_cast<int>(::getuid());
  draft.user = user_name(draft.uid);
  draft.pid = static_cast<int>(::getpid());
  draft.started = std::time(nullptr);
  draft.ended = 0;

  // Write and lock a temporary file, then rename it into place: a reader never sees a record
  // that is not both complete and locked.
  std::string path = dir + "/" + draft.id + ".json";
  std::string temp = dir + "/." + draft.id + ".json.tmp";
  int fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "cannot write {}: {}; set DDPX_JOBS_DIR to a writable folder",
             temp, std::strerror(errno));
  ::fchmod(fd, 0644);
  ::flock(fd, LOCK_EX);
  std::string text = to_json(draft);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::rename(temp.c_str(), path.c_str()) == 0;
  if (!ok) {
    int saved = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    fail(ErrorKind::kIo, "cannot write the job record {}: {}", path, std::strerror(saved));
  }
  return HostReservation(std::move(draft), path, fd);
}

HostReservation::HostReservation(HostReservation&& other) noexcept
    : record_(std::move(other.record_)), path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

HostReservation::~HostReservation() { finish(-1); }

void HostReservation::finish(int exit_code) {
  if (fd_ < 0) return;
  record_.ended = std::max<std::int64_t>(std::time(nullptr), record_.started);
  record_.ended += record_.ended == 0;
  record_.exit_code = exit_code;
  record_.state = JobState::kEnded;
  // Rewritten in place while still locked (the lock stays on this inode), then unlocked.
  std::string text = to_json(record_);
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t ignored = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)ignored;
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace ddpx::launch
