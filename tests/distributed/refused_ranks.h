// Test helper: a layout that every rank must refuse once the job has joined, before its first
// collective. A rank that communicates first, or that does not refuse, leaves the others waiting
// in a collective until the group's timeout: so each rank's message, each rank's collective
// record and the time the whole took are checked, not rank 0's text alone.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/ranks.h"
#include "trace/collective_trace.h"

namespace ddpx::test {

// The group's collective timeout in a refusal test, and the most the refused job may take: ranks
// as threads join in about a second here (8 ranks on the loaded 2-core machine: under 3 s), so
// a rank left waiting in a collective (the shared-memory barrier waits out its timeout) shows
// as a job that took the whole timeout.
constexpr std::chrono::seconds kRefusalGroupTimeout{60};
constexpr double kRefusalMaxSeconds = 20;

// Runs build(rank, context) on `world_size` ranks (threads in a real Gloo group on 127.0.0.1)
// and expects every rank to throw ddpx::Error(kUsage) whose message holds each of `expected`,
// with no new entry in its collective record (which must be on: DDPX_TRACE unset), and the job
// to end within kRefusalMaxSeconds. Returns rank 0's message.
inline std::string expect_refused_before_any_collective(
    int world_size, const std::function<void(int, dist::Context&)>& build,
    const std::vector<std::string>& expected) {
  std::vector<std::string> messages(world_size);
  std::vector<long> collectives(world_size, -1);
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(
      world_size,
      [&](int rank, dist::Context& context) {
        EXPECT_TRUE(context.trace()) << "rank " << rank << ": no collective record to count in";
        if (!context.trace()) return;
        const size_t before = context.trace()->snapshot().entries.size();
        try {
          build(rank, context);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kUsage) << "rank " << rank << ": " << e.what();
          messages[rank] = e.what();
        }
        collectives[rank] = static_cast<long>(context.trace()->snapshot().entries.size() - before);
      },
      kRefusalGroupTimeout);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_ALL_RANKS_OK(errors);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_FALSE(messages[r].empty()) << "rank " << r << " was not refused";
    for (const std::string& part : expected)
      EXPECT_NE(messages[r].find(part), std::string::npos)
          << "rank " << r << "'s message lacks \"" << part << "\": " << messages[r];
    EXPECT_EQ(collectives[r], 0) << "rank " << r << " communicated before refusing";
  }
  EXPECT_LT(seconds, kRefusalMaxSeconds)
      << "refusing took " << seconds << " s of the " << kRefusalGroupTimeout.count()
      << " s timeout: a rank waited in a collective";
  return messages[0];
}

}  // namespace ddpx::test
