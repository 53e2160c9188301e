// Host-wide reservations: the device choice against live jobs, and real processes racing for
// the same GPUs through the shared job folder (the GPU ids are the test's; the locking, files
// and records are the real ones), and the hand-over of a job service's hold to its launcher.
#include "launch/reservation.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "core/error.h"
#include "launch/job_control.h"
#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

JobRecord live_job(const std::string& id, std::vector<std::string> devices) {
  JobRecord r;
  r.id = id;
  r.user = "alice";
  r.pid = 4242;
  r.devices = std::move(devices);
  return r;
}

TEST(ReservationTest, FreeDevicesSkipThoseLiveJobsHold) {
  std::vector<JobRecord> live = {live_job("a1", {"0", "2"})};
  EXPECT_EQ(free_devices({"0", "1", "2", "3"}, 2, live), (std::vector<std::string>{"1", "3"}));
  std::string error = test::usage_error([&] { free_devices({"0", "1", "2", "3"}, 3, live); });
  EXPECT_TRUE(contains(error, "only 2 of 4 are free")) << error;
  EXPECT_TRUE(contains(error, "GPU 0 by job a1 (user alice, pid 4242)")) << error;
}

TEST(ReservationTest, AnExplicitListNamesTheJobHoldingAGpu) {
  std::vector<JobRecord> live = {live_job("b2", {"1"})};
  EXPECT_NO_THROW(check_devices_free({"0", "3"}, live));
  std::string error = test::usage_error([&] { check_devices_free({"0", "1"}, live); });
  EXPECT_TRUE(contains(error, "--gpus 0,1: reserved: GPU 1 by job b2")) << error;
}

// Four processes start at the same moment, each asking for one of four GPUs: every one gets
// its own, and a fifth finds none free while they live.
TEST(ReservationTest, ConcurrentJobsNeverGetTheSameGpu) {
  test::TempDir dir;
  ::setenv("DDPX_JOBS_DIR", dir.file("jobs").c_str(), 1);
  const std::vector<std::string> visible = {"0", "1", "2", "3"};
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto held = HostReservation::acquire(JobRecord{}, [&](const std::vector<JobRecord>& live) {
        auto free = free_devices(visible, 1, live);
        return std::vector<std::string>{free.front()};
      });
      test::write_bytes(dir.file("got." + std::to_string(i)), held.record().devices.at(0));
      ::sleep(3);
      held.finish(0);
      ::_exit(0);
    }
    children.push_back(pid);
  }
  std::set<std::string> got;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(wait_for_file(dir.file("got." + std::to_string(i)), 20));
    got.insert(slurp(dir.file("got." + std::to_string(i))));
  }
  EXPECT_EQ(got, (std::set<std::string>{"0", "1", "2", "3"}));
  std::string error = test::usage_error([&] {
    HostReservation::acquire(JobRecord{}, [&](const std::vector<JobRecord>& live) {
      return free_devices(visible, 1, live);
    });
  });
  EXPECT_TRUE(contains(error, "only 0 of 4 are free")) << error;
  for (pid_t pid : children) EXPECT_EQ(wait_exit_code(pid, 20), 0);
  // Their reservations ended with them: all four are free again and recorded as ended.
  auto jobs = read_jobs(dir.file("jobs"));
  ASSERT_EQ(jobs.size(), 4u);
  for (const JobRecord& r : jobs) EXPECT_EQ(r.state, JobState::kEnded) << r.id;
  EXPECT_EQ(free_devices(visible, 4, live_jobs(dir.file("jobs"))), visible);
  ::unsetenv("DDPX_JOBS_DIR");
}

// A job service holds a job's GPU in a "starting" record before the job's launcher runs; the
// launcher takes that record over (the GPU is never free in between), and nobody else can.
TEST(ReservationTest, ALauncherTakesOverTheRecordItsServiceHeldForIt) {
  test::TempDir dir;
  ::setenv("DDPX_JOBS_DIR", dir.file("jobs").c_str(), 1);
  const std::vector<std::string> visible = {"0", "1"};
  pid_t service = ::fork();
  if (service == 0) {
    JobRecord claim;
    claim.id = "svc7";
    claim.kind = kStartingKind;
    auto held = HostReservation::acquire(
        claim, [](const std::vector<JobRecord>&) { return std::vector<std::string>{"1"}; });
    test::write_bytes(dir.file("held"), "1");
    ::sleep(30);
    ::_exit(0);
  }
  ASSERT_TRUE(wait_for_file(dir.file("held"), 20));
  auto first_free = [&](const std::vector<JobRecord>& live) {
    return std::vector<std::string>{free_devices(visible, 1, live).front()};
  };
  // Another job does not see GPU 1 free, nor may it take the record over under another name.
  JobRecord other;
  other.id = "other";
  EXPECT_EQ(HostReservation::acquire(other, first_free).record().devices,
            std::vector<std::string>{"0"});
  std::string error = test::usage_error([&] {
    JobRecord wrong;
    wrong.id = "svc8";
    HostReservation::acquire(wrong, first_free, "svc7");
  });
  EXPECT_TRUE(contains(error, "DDPX_RESERVATION=svc7 but the job is named 'svc8'")) << error;
  // `ddpx stop` does not signal the service that holds it.
  error = test::usage_error([&] { stop_job("svc7", 1); });
  EXPECT_TRUE(contains(error, "job svc7 is starting")) << error;
  // The launcher named svc7 may: the record becomes its own, holding GPU 1.
  JobRecord launcher;
  launcher.id = "svc7";
  launcher.kind = "run";
  HostReservation taken = HostReservation::acquire(
      launcher,
      [&](const std::vector<JobRecord>& live) {
        check_devices_free({"1"}, live);
        return std::vector<std::string>{"1"};
      },
      "svc7");
  ::kill(service, SIGKILL);  // the service's hold ends; the launcher's goes on
  wait_exit_code(service, 20);
  auto live = live_jobs(dir.file("jobs"));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].id, "svc7");
  EXPECT_EQ(live[0].kind, "run");
  EXPECT_EQ(live[0].pid, static_cast<int>(::getpid()));
  EXPECT_EQ(live[0].devices, std::vector<std::string>{"1"});
  taken.finish(0);
  ::unsetenv("DDPX_JOBS_DIR");
}

TEST(ReservationTest, AJobFolderThatCannotBeWrittenIsOneClearLine) {
  ::setenv("DDPX_JOBS_DIR", "/proc/ddpx-jobs", 1);
  try {
    jobs_dir();
    ADD_FAILURE() << "expected an error";
  } catch (const ddpx::Error& e) {
    EXPECT_TRUE(contains(e.what(), "the job folder /proc/ddpx-jobs cannot be written")) << e.what();
    EXPECT_TRUE(contains(e.what(), "set DDPX_JOBS_DIR")) << e.what();
  }
  ::unsetenv("DDPX_JOBS_DIR");
}

}  // namespace
}  // namespace ddpx::launch::testing
