// `ddpx run N -- bench memory --shard S [--json]`: the memory of one rank's model states under a
// parallel plan, beside ZeRO's formula. Each rank builds the model, wraps it in the plan of
// --shard (none: the data-parallel plan, DDP), trains two steps on random batches and a third
// forward and backward, and then counts, on this rank: parameter bytes (every parameter's
// allocated storage, plus a sharded plan's shards), gradient bytes (whole gradients and gradient
// shards) and optimizer-state bytes (momentum; Adam's two moments), and reads the process's
// peak resident memory and the peak of CPU tensor bytes (parallel/planner/tensor_bytes.h, what
// `ddpx plan` predicts). The formula (fp32: 4 bytes a parameter, K = optimizer bytes a parameter,
// Psi parameters, N ranks; a sharded plan keeps an fp32 shard of the parameters, as DeepSpeed's
// ZeRO-1/2 keep their fp32 partition):
//   none (DDP)          (4 + 4 + K) Psi
//   optimizer (ZeRO-1)  (4 + 4) Psi + (4 + 4 + K) Psi / N
//   gradients (ZeRO-2)  4 Psi + (4 + 4 + K) Psi / N
//   full (ZeRO-3)       (4 + 4 + K) Psi / N
// With --pipeline_parallel P or --tensor_parallel T instead, the rank's own parameters Psi_r (its
// stages', or its pieces and the unsplit layers) make the formula: (4 + 4 + K) Psi_r, and the
// parameter bytes count every storage the rank still holds, so a whole model kept beside the
// stage or the pieces would show.
// A language model (GPT, BERT) trains on random token windows of --seq_len (0: its context) over
// --vocab_size (0: its tokenizer's), the loss over every token (vocabulary-parallel under
// --tensor_parallel), as ddpx train; --activation_checkpointing recomputes its blocks as there.
// Rank 0 prints every rank's figures: lines for people, or with --json one JSON object a rank.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/choices.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/sharded/shard_mode.h"

namespace ddpx::bench {

struct ShardMemoryOptions {
  std::string model = "resnet18";
  int64_t image_size = 0;  // 0: the model's default (registry) size
  int64_t batch_size = 2;  // per rank
  int64_t num_classes = 1000;
  int64_t seq_len = 0;     // a language model's window (0: its context)
  int64_t vocab_size = 0;  // a language model's vocabulary (0: its tokenizer's)
  bool bias = true;        // a GPT's biases (--no_bias: none)
  std::string activation_checkpointing = "none";
  int threads = 0;
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  int pipeline_parallel = 1;  // > 1: the pipeline plan's stages (1F1B)
  int microbatches = 0;       // the pipeline's; 0: ddpx train's (pipeline_defaults.h)
  parallel::PipelineBalance pipeline_balance = parallel::PipelineBalance::kTime;  // as ddpx train
  parallel::PipelineSchedule pipeline_schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 0;           // V, interleaved; 0: 2
  int tensor_parallel = 1;           // > 1: pieces
  bool sequence_parallel = false;    // the tensor-parallel plan's --sequence_parallel
  int64_t vocab_divisible_by = 128;  // ... and --vocab_divisible_by (a language model's)
  bool adamw = false;  // --optimizer adamw (K = 8) instead of SGD with momentum (K = 4)
  bool json = false;
  // kGloo: DDP's gradient buckets are ordinary tensors, not shared-memory segments, so the
  // tensor peak holds them (as a GPU's does).
  dist::Transport transport = dist::Transport::kAuto;
};

void run_shard_memory(const ShardMemoryOptions& options);

}  // namespace ddpx::bench
