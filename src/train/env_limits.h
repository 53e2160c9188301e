// Limits a run takes from its environment, over its command line, so that a test or a smoke
// run of a printed command (run-ddp.sh's, the README's) shortens it without editing it:
//   DDPX_EPOCHS=N            --num_epochs N
//   DDPX_MAX_STEPS=N         at most N batches per epoch (the smaller of it and
//                            --limit_train_batches)
//   DDPX_MAX_TEST_BATCHES=N  at most N test batches
//   DDPX_BATCH_SIZE=N        --batch_size N and --eval_batch_size N
// Each one set is named in the run's header, so a shortened run never passes for a full one.
// `ddpx run` passes them to every worker like the rest of its environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/options.h"

namespace ddpx::train {

struct EnvLimit {
  std::string variable;  // "DDPX_EPOCHS"
  int64_t value = 0;
  std::string effect;  // "--num_epochs 1"
};

// The limits set, in the order above; throws ddpx::Error(kUsage) naming the variable when one
// is set but not a whole number >= 1.
std::vector<EnvLimit> env_limits();

// Applies env_limits() to `options`.
void apply_env_limits(TrainOptions& options);

// "limits from the environment: DDPX_EPOCHS=1 (--num_epochs 1) | ..." when `options` carry the
// limits set (apply_env_limits() ran on them: `ddpx train` applies them, a benchmark that
// builds its own options does not); "" when none is set or they were not applied.
std::string env_limits_line(const TrainOptions& options);

}  // namespace ddpx::train
