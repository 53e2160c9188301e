// The pipeline flags' automatic values (--microbatches 0, --stages_per_rank 0), written once for
// every command that takes them: ddpx train and bench train run them, bench memory measures what
// train would hold and ddpx plan predicts it, so the four must choose the same.
#pragma once

#include <cstdint>

#include "parallel/pipeline/schedule.h"

namespace ddpx::parallel {

// Micro-batches a replica's batch of `replica_batch` rows is cut into by a pipeline of `stages`:
// `given` where above 0, else 2 x stages (1F1B's bubble at a third of P's), or stages where only
// that divides the batch (`replica_batch` 0: not known yet, 2 x stages). A count that does not
// divide the batch is the caller's to refuse, in its own words.
inline int pipeline_microbatches(int given, int stages, int64_t replica_batch) {
  if (given > 0) return given;
  if (replica_batch > 0 && replica_batch % (2 * stages) != 0 && replica_batch % stages == 0)
    return stages;
  return 2 * stages;
}

// Stages a rank runs (interleaved's V): `given` where above 0, else 2 under the interleaved
// schedule and 1 under the others.
inline int pipeline_stages_per_rank(int given, PipelineSchedule schedule) {
  if (given > 0) return given;
  return schedule == PipelineSchedule::kInterleaved ? 2 : 1;
}

}  // namespace ddpx::parallel
