// Test helper: a `ddpx run` job that every rank must refuse once it has joined, before its first
// collective. A rank that communicates first, or that does not refuse, leaves the others waiting
// in a collective until --timeout; so every rank's log, every rank's collective record, the exit
// code and the time the job took are checked, not one line of the console.
#pragma once

#include <string>
#include <vector>

namespace ddpx::test {

// Runs `ddpx run <ranks> --log_dir <a fresh folder> -- <train> --timeout <kRefusedJobTimeout>`
// and expects: exit code 2 (a usage error), within kRefusedJobMaxSeconds and not killed at the
// test's limit; each of `expected` in every rank's log (rank<K>.log); and every rank's collective
// record (trace.0/rank<K>.trace, present: DDPX_TRACE is on) empty. Returns the job's console.
std::string expect_job_refused_before_any_collective(int ranks, const std::string& train,
                                                     const std::vector<std::string>& expected);

// The job's collective timeout, and the most a refused job may take (its processes start,
// load libtorch and join in 5 to 15 s on the loaded 2-core machine).
constexpr int kRefusedJobTimeout = 120;
constexpr double kRefusedJobMaxSeconds = 60;

}  // namespace ddpx::test
