// Snapshots on request: a running `ddpx train` writes a checkpoint at its next step when asked,
// and goes on (SIGUSR1) or stops after it (SIGUSR2). The request reaches ranks at different
// moments (the launcher forwards it, srun forwards it, `ddpx snapshot JOB` and the job service
// send it), so the ranks agree on it with one small all-reduce every few optimizer steps: every
// rank sees a request that any rank got, at the same step, and the checkpoint is taken there.
// Each rank counts the requests it was sent; the most any rank counted is the number of
// requests, so one request that reaches rank 0 before a check and rank 1 after it is one
// snapshot, not two.
#pragma once

#include <cstdint>

#include "distributed/context.h"

namespace ddpx::train {

struct SnapshotRequest {
  bool snapshot = false;  // write a checkpoint now
  bool stop = false;      // and stop after it
  explicit operator bool() const { return snapshot || stop; }
};

// Installs the SIGUSR1/SIGUSR2 handlers (for the life of the process; idempotent) and unblocks
// the two signals. ddpx-torch calls it first thing for `train`; before that, `ddpx` (the front)
// and the launcher's fork keep them blocked, so a request that comes while the process starts
// is held until now rather than ending it (the signals' default action).
void install_snapshot_signals();

class SnapshotRequests {
 public:
  // Installs the handlers too.
  SnapshotRequests(dist::Context& context, torch::Device device, int64_t check_every);

  // Called after each optimizer step with the global step count; every `check_every` steps
  // (a collective: every rank calls it with the same step) returns what any rank was asked for,
  // and clears it. `force` checks now (an epoch's end).
  SnapshotRequest poll(int64_t global_step, bool force = false);

 private:
  dist::Context& context_;
  torch::Device device_;
  int64_t check_every_;
  int64_t snapshots_taken_ = 0;  // requests already answered (the most any rank counted)
  int64_t stops_taken_ = 0;
};

}  // namespace ddpx::train
