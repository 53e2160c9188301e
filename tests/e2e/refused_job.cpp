#include "e2e/refused_job.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/support.h"
#include "trace/collective_trace.h"

namespace ddpx::test {

std::string expect_job_refused_before_any_collective(int ranks, const std::string& train,
                                                     const std::vector<std::string>& expected) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r =
      run_command(ddpx(fmt::format("run {} --log_dir {} -- {} --timeout {}", ranks, dir.path(),
                                   train, kRefusedJobTimeout)),
                  2 * kRefusedJobTimeout);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_LT(seconds, kRefusedJobMaxSeconds)
      << "refusing took " << seconds << " s of the " << kRefusedJobTimeout
      << " s timeout: a rank waited in a collective\n"
      << r.output;
  // The job's folder: <log_dir>/<time>_<job id>/.
  std::string job_dir;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.is_directory()) job_dir = entry.path().string();
  }
  EXPECT_FALSE(job_dir.empty()) << "no job folder in " << dir.path() << "\n" << r.output;
  if (job_dir.empty()) return r.output;
  for (int rank = 0; rank < ranks; ++rank) {
    std::ifstream in(fmt::format("{}/rank{}.log", job_dir, rank));
    std::stringstream log;
    log << in.rdbuf();
    for (const std::string& part : expected)
      EXPECT_NE(log.str().find(part), std::string::npos)
          << "rank " << rank << "'s log lacks \"" << part << "\":\n"
          << log.str();
    auto record = trace::read_trace(job_dir + "/trace.0", rank);
    EXPECT_TRUE(record) << "rank " << rank << " has no collective record in " << job_dir
                        << "/trace.0";
    if (!record) continue;
    for (const trace::Entry& e : record->entries)
      ADD_FAILURE() << "rank " << rank << " communicated before refusing: " << e.sig.text();
  }
  return r.output;
}

}  // namespace ddpx::test
