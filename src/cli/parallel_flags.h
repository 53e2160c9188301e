// The parallelism flags, declared once for every command that takes them: the mesh sizes
// (--pipeline_parallel, --tensor_parallel and its --vocab_divisible_by), sharding (--shard,
// --shard_units,
// --shard_gather_dtype), the pipeline's schedule (--microbatches, --pipeline_schedule,
// --stages_per_rank, --pipeline_balance), --sequence_parallel and --activation_checkpointing.
// One name, help text and default each, parsed into one typed struct, so that `ddpx train`,
// `bench train`, `bench memory` and `plan` cannot disagree on what a value means; their automatic
// values (--microbatches 0, --stages_per_rank 0) are chosen in one place below cli/
// (parallel/pipeline/pipeline_defaults.h). A command that has no use for a flag does not take it
// (`plan` searches the mesh sizes and weighs every --shard mode; `tune batch_size` times one
// process and takes none); --help lists the ones it takes under "Parallelism".
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "bench/shard_memory.h"
#include "bench/train_bench.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/sharded/shard_mode.h"
#include "train/options.h"

namespace ddpx::cli {

// The heading --help lists the group under.
inline constexpr const char* kParallelGroup = "Parallelism";

// The group's values; the defaults are ddpx train's.
struct ParallelOptions {
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  std::vector<std::string> shard_units;  // empty: every block of the model's Sequentials
  train::GatherDtype shard_gather_dtype = train::GatherDtype::kAuto;
  int pipeline_parallel = 1;
  int microbatches = 0;  // 0: pipeline_defaults.h's
  parallel::PipelineSchedule pipeline_schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 0;  // 0: pipeline_defaults.h's
  parallel::PipelineBalance pipeline_balance = parallel::PipelineBalance::kTime;
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  int64_t vocab_divisible_by = 128;  // Megatron-LM's --make-vocab-size-divisible-by
  std::string activation_checkpointing = "none";
};

// The parts of the group a command takes, or-ed together.
enum ParallelFlags : unsigned {
  kShardFlag = 1u << 0,             // --shard
  kShardUnitsFlags = 1u << 1,       // --shard_units, --shard_gather_dtype
  kMeshSizeFlags = 1u << 2,         // --pipeline_parallel, --tensor_parallel,
                                    // --vocab_divisible_by
  kPipelineFlags = 1u << 3,         // --microbatches, --pipeline_schedule, --stages_per_rank,
                                    // --pipeline_balance
  kSequenceParallelFlag = 1u << 4,  // --sequence_parallel
  kCheckpointingFlag = 1u << 5,     // --activation_checkpointing
  kVocabFlag = 1u << 6,             // --vocab_divisible_by alone (kMeshSizeFlags include it)
  kAllParallelFlags = (1u << 7) - 1,
};

// Adds the flags of `which` to `cmd` in the "Parallelism" group, parsed into `options`, whose
// values --help shows as the defaults.
void add_parallel_flags(CLI::App* cmd, ParallelOptions& options, unsigned which);

// The group's values into what a command runs: ddpx train's options (every flag), bench train's
// (every flag: it runs ddpx train's loop) and bench memory's (all but --shard_units and
// --shard_gather_dtype: it measures model states).
void apply_parallel_options(const ParallelOptions& options, train::TrainOptions& into);
void apply_parallel_options(const ParallelOptions& options, bench::TrainBenchOptions& into);
void apply_parallel_options(const ParallelOptions& options, bench::ShardMemoryOptions& into);

}  // namespace ddpx::cli
