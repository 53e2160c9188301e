// Every test runs with a job folder of its own: DDPX_JOBS_DIR names a fresh folder from the
// test's start to its end, so the jobs a test starts (`ddpx run`, `ddpx shell`, the launcher
// library) never land in the host's job list (/tmp/ddpx-jobs) beside its users' jobs, and no
// test sees another's. A test that writes there anyway (a child started with a cleaned
// environment, a folder set and lost) fails, naming the record.
//
// A listener, not a fixture: it covers every test of every binary without each one opting in.
// gtest calls OnTestEnd of the listeners in reverse order, so the check below runs before the
// default printer reports the test, and its failure counts as the test's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "core/flight_recorder.h"
#include "support/support.h"

namespace ddpx::test {
namespace {

// launch/job_record.cpp's default: where a job goes when DDPX_JOBS_DIR is not set.
constexpr const char* kHostJobsDir = "/tmp/ddpx-jobs";

class JobsDirPerTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    const char* saved = std::getenv("DDPX_JOBS_DIR");
    saved_ = saved ? std::optional<std::string>(saved) : std::nullopt;
    dir_ = std::make_unique<TempDir>();
    ::setenv("DDPX_JOBS_DIR", dir_->file("jobs").c_str(), 1);
    started_ = std::filesystem::file_time_type::clock::now();
  }

  void OnTestEnd(const ::testing::TestInfo&) override {
    if (saved_)
      ::setenv("DDPX_JOBS_DIR", saved_->c_str(), 1);
    else
      ::unsetenv("DDPX_JOBS_DIR");
    dir_.reset();
    check_host_jobs();
  }

  // A record written since the test started that names one of this process's temporary folders
  // or its working directory (a job's command or log folder) came from this test.
  void check_host_jobs() const {
    std::error_code ec;
    std::string cwd = std::filesystem::current_path(ec).string();
    for (const auto& entry : std::filesystem::directory_iterator(kHostJobsDir, ec)) {
      std::error_code time_ec;
      if (entry.path().extension() != ".json" || entry.last_write_time(time_ec) < started_ ||
          time_ec)
        continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      std::string record = text.str();
      bool ours = !cwd.empty() && record.find("\"" + cwd) != std::string::npos;
      for (const std::string& dir : temp_dirs())
        ours = ours || record.find(dir) != std::string::npos;
      if (ours)
        ADD_FAILURE() << "this test wrote " << entry.path().string()
                      << " into the host's job list; its jobs belong in $DDPX_JOBS_DIR:\n"
                      << record;
    }
  }

  std::optional<std::string> saved_;
  std::unique_ptr<TempDir> dir_;
  std::filesystem::file_time_type started_;
};

const bool kInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new JobsDirPerTest);
  // Before any test makes a process group, with one thread running: tests run ranks as threads
  // of one process, which c10d's Flight Recorder does not survive (core/flight_recorder.h).
  disable_flight_recorder();
  return true;
}();

}  // namespace
}  // namespace ddpx::test
