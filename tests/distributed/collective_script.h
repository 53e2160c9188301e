// test_distributed doubles as a scripted rank: started with DDPX_TEST_COLLECTIVES set (by `ddpx run
// N
// -- test_distributed --gtest_filter=CollectiveScript.*`), its one test joins the job from the
// environment, runs the script and ends the process (0, or 1 printing the error). The script is
// words separated by spaces:
//   allreduce:N   sum of a float tensor of N elements     broadcast:N   float[N] from rank 0
//   barrier       stop  (raise SIGSTOP on itself)         nojoin        sleep, never join
//   sleep:S       sleep S seconds
//   sync          (DDPX_TEST_QUEUED=1) wait until the collectives issued so far have run
// DDPX_TEST_QUEUED=1 makes allreduce and broadcast return from wait() before they run, as
// NCCL's do (queued_backend.h).
// DDPX_TEST_COLLECTIVES_RANK<K> replaces the script on rank K; DDPX_TEST_TIMEOUT_S sets the
// timeout (rendezvous and collectives, default 5 s).
#pragma once

#include <string>

namespace ddpx::test {

// Shell words (VAR=value ...) that make this test binary run `script` on every rank, or
// `rank1_script` on rank 1 when it is not empty.
std::string collective_script_env(const std::string& script, const std::string& rank1_script = "",
                                  double timeout_s = 3);

std::string self_binary();  // this test binary's command line as a scripted rank

}  // namespace ddpx::test
