#include "e2e/refused_job.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "support/support.h"
#include "trace/collective_trace.h"

namespace ddpx::test {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string expect_job_refused_before_any_collective(int ranks, const std::string& train,
                                                     const std::vector<std::string>& expected) {
  TempDir dir;
  // Each rank started as `ddpx run` starts it (the environment contract, a FileStore to meet
  // at, a trace folder), but not by `ddpx run`: its launcher stops the other workers as soon as
  // the first one fails, before a slower rank has said anything (1 run in 3 here), and every
  // rank's own line and exit code is what is checked.
  std::string script;
  const int port = free_port();
  for (int rank = 0; rank < ranks; ++rank) {
    script += fmt::format(
        "(RANK={0} LOCAL_RANK={0} WORLD_SIZE={1} LOCAL_WORLD_SIZE={1} MASTER_ADDR=127.0.0.1 "
        "MASTER_PORT={2} DDPX_STORE_FILE={3}/rendezvous DDPX_TRACE_DIR={3}/trace DDPX_THREADS=1 "
        "{4} "
        "> {3}/rank{0}.log 2>&1; "
        "echo $? > {3}/rank{0}.exit) & ",
        rank, ranks, port, dir.path(),
        ddpx(fmt::format("{} --timeout {}", train, kRefusedJobTimeout)));
  }
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = run_command(script + "wait", 2 * kRefusedJobTimeout);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kRefusedJobMaxSeconds)
      << "refusing took " << seconds << " s of the " << kRefusedJobTimeout
      << " s timeout: a rank waited in a collective\n"
      << r.output;
  std::string logs;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string log = read_text(fmt::format("{}/rank{}.log", dir.path(), rank));
    logs += log;
    EXPECT_EQ(read_text(fmt::format("{}/rank{}.exit", dir.path(), rank)), "2\n")
        << "rank " << rank << "'s exit code (2: a usage error)\n"
        << log;
    for (const std::string& part : expected)
      EXPECT_NE(log.find(part), std::string::npos)
          << "rank " << rank << "'s output lacks \"" << part << "\":\n"
          << log;
    auto record = trace::read_trace(dir.file("trace"), rank);
    EXPECT_TRUE(record) << "rank " << rank << " has no collective record in " << dir.path()
                        << "/trace";
    if (!record) continue;
    for (const trace::Entry& e : record->entries)
      ADD_FAILURE() << "rank " << rank << " communicated before refusing: " << e.sig.text();
  }
  return logs;
}

}  // namespace ddpx::test
