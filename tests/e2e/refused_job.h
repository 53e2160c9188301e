// Test helper: a job that every rank must refuse once it has joined, before its first
// collective. A rank that communicates first, or that does not refuse, leaves the others waiting
// in a collective until --timeout; so every rank's log, every rank's collective record, the exit
// code and the time the job took are checked, not one line of the console.
#pragma once

#include <string>
#include <vector>

namespace ddpx::test {

// Starts `ddpx <train> --timeout <kRefusedJobTimeout>` as `ranks` processes of one job on
// 127.0.0.1 (the environment contract torchrun and Slurm use) and expects of every rank: exit
// code 2 (a usage error), each of `expected` in its output, and an empty collective record
// (DDPX_TRACE_DIR/rank<K>.trace, present: DDPX_TRACE is on); and of the job: its end within
// kRefusedJobMaxSeconds, not killed at the test's limit. Returns the ranks' output.
std::string expect_job_refused_before_any_collective(int ranks, const std::string& train,
                                                     const std::vector<std::string>& expected);

// The job's collective timeout, and the most a refused job may take: its processes start, load
// libtorch and join in 5 to 15 s on a 2-core machine (tens of seconds when it is loaded), while
// ranks left waiting in a collective for the others take the whole timeout.
constexpr int kRefusedJobTimeout = 300;
constexpr double kRefusedJobMaxSeconds = 150;

}  // namespace ddpx::test
