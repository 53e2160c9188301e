// Steady-state training throughput: images/s for a model, batch, world size and data source.
// Run under `ddpx run N -- bench train` for N workers. Two loops:
//
// --loop trainer (the default): ddpx train's own loop (train/trainer.h, run_training with a
// step hook), the code a user's run executes, timed as the PyTorch peer (bench/pytorch_train.py)
// times its loop: a barrier and a device synchronization before the first timed step, one after
// the last, none in between ("sync: window ends"). Its loader has --workers threads per rank.
// This is the figure to compare with PyTorch.
//
// --loop phases: a copy of the step that splits each step's time into data wait,
// forward+backward, communication not hidden by backward, and the optimizer step. On a GPU each
// phase ends with a device synchronization (three a step), so its images/s is lower than the
// trainer loop's; it is a diagnosis, not the comparison. "Communication not hidden" is measured,
// not inferred from reducer internals: blocks of synchronised steps alternate with blocks of
// no_sync() steps (identical compute, no communication); the difference in forward+backward time
// is reported.
//
// On a GPU (--device cuda, with --amp and --channels_last as `ddpx train`) both report the peak
// memory the allocator held and the model FLOPs utilisation: 3 x the forward FLOPs per image
// (counted, models/flops.h) x images/s per rank over the GPU's published peak for the compute
// dtype (distributed/peak_flops.h).
//
// A language model (the gpt family, --dataset tokens --seq_len T) runs the trainer loop only,
// with the LM recipe's optimizer (AdamW, decay on matrices, clip 1), and counts tokens: tokens/s,
// and FLOPs by nanoGPT's and llm.c's formula, 6N + 12·L·C·T a token for training
// (models/gpt.h), not by the counter (which sees no FLOPs inside fused attention kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/names.h"
#include "data/dataset.h"
#include "distributed/choices.h"
#include "models/stem.h"
#include "optim/amp.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/sharded/shard_mode.h"
#include "train/options.h"

namespace ddpx::bench {

enum class BenchLoop { kTrainer, kPhases };
inline constexpr NameTable<BenchLoop, 2> kBenchLoopNames{
    {{BenchLoop::kTrainer, "trainer"}, {BenchLoop::kPhases, "phases"}}};

struct TrainBenchOptions {
  BenchLoop loop = BenchLoop::kTrainer;
  std::string model = "resnet18";
  models::Stem stem = models::Stem::kImagenet;
  data::DatasetId data = data::DatasetId::kSynthetic;
  std::string data_dir;
  int64_t image_size = 32;
  int64_t num_classes = 10;  // synthetic only; datasets bring their own
  int64_t seq_len = 0;       // --dataset tokens: the window (0: the model's context)
  int64_t vocab_size = 0;    // --dataset tokens: 0: the largest token + 1
  bool bias = true;          // a GPT's biases (--no_bias: none)
  int64_t batch_size = 64;   // per rank
  int64_t steps = 30;        // measured steps (half synced, half no_sync when distributed)
  int64_t warmup = 5;
  int threads = 0;         // 0: default_threads() (distributed/threads.h)
  int workers = 1;         // loader threads per rank (--loop trainer; phases: one)
  bool augment = true;     // random crop (padding 4) + flip, as in the workload
  int64_t bucket_mb = 25;  // DDP bucket cap (--loop phases; the trainer's are ddpx train's)
  int64_t first_bucket_mb = 1;
  dist::CommHook comm_hook = dist::CommHook::kAllreduce;
  int64_t powersgd_rank = 1;  // with comm_hook powersgd
  int64_t powersgd_start_iter = 1000;
  dist::Transport transport = dist::Transport::kAuto;
  bool fused_step = true;  // false: torch::optim::SGD::step, no split (--optimizer_step libtorch)
  std::string json;        // append a JSON line with the figures (rank 0)
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;
  optim::Amp amp = optim::Amp::kOff;
  bool channels_last = false;
  // --loop trainer: ddpx train's --shard, --shard_units and --shard_gather_dtype
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  std::vector<std::string> shard_units;
  train::GatherDtype shard_gather_dtype = train::GatherDtype::kAuto;
  // --loop trainer: ddpx train's --pipeline_parallel, --microbatches, --pipeline_schedule,
  // --stages_per_rank and --pipeline_balance
  int pipeline_parallel = 1;
  int microbatches = 0;
  parallel::PipelineSchedule pipeline_schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 0;
  parallel::PipelineBalance pipeline_balance = parallel::PipelineBalance::kTime;
  int tensor_parallel = 1;     // --loop trainer: ddpx train's --tensor_parallel
  bool deterministic = false;  // --loop trainer: ddpx train's --deterministic
  int64_t deterministic_atom = 8;
  bool sequence_parallel = false;                 // and --sequence_parallel
  int64_t vocab_divisible_by = 128;               // and --vocab_divisible_by
  std::string activation_checkpointing = "none";  // --loop trainer: ddpx train's
};

struct TrainBenchResult {
  std::string sync;                // when the host waited for the device, beside the figure
  double images_per_sec = 0;       // all ranks, synchronised steps (tokens for a language model)
  double data_wait_ms = 0;         // per step
  double forward_backward_ms = 0;  // per synchronised step, including exposed communication
  double exposed_comm_ms = 0;      // synced forward+backward minus no_sync forward+backward
  double optimizer_ms = 0;
  double step_ms = 0;
  double startup_s = 0;      // job start (launcher or process) to the first training step
  double forward_gflop = 0;  // per image (models/flops.h); a language model's: per token, 2N + 4LCT
  std::optional<double> mfu;              // 3 x forward FLOPs x images/s per rank / peak
  std::optional<double> peak_memory_gib;  // GPU: the most this rank's allocator held
  std::string plan_summary;  // --loop trainer: the plan's epoch summary over the timed steps
};

TrainBenchResult run_train_bench(const TrainBenchOptions& options);

// --loop trainer (train_loop_bench.cpp); run_train_bench calls it for that loop.
TrainBenchResult run_train_loop_bench(const TrainBenchOptions& options);

// Seconds from the job's start (the `ddpx run` launcher that started this worker, else this
// process) to now.
double job_age_seconds();

}  // namespace ddpx::bench
