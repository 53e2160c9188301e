// The parallelism flags, declared once (see parallel_flags.h).
#include "cli/parallel_flags.h"

#include "cli/choices.h"

namespace ddpx::cli {
namespace {

// The fields a bench command's options share with ddpx train's.
template <typename Into>
void apply_common(const ParallelOptions& o, Into& into) {
  into.shard = o.shard;
  into.pipeline_parallel = o.pipeline_parallel;
  into.microbatches = o.microbatches;
  into.pipeline_schedule = o.pipeline_schedule;
  into.stages_per_rank = o.stages_per_rank;
  into.pipeline_balance = o.pipeline_balance;
  into.tensor_parallel = o.tensor_parallel;
  into.sequence_parallel = o.sequence_parallel;
}

// --vocab_divisible_by: every command that takes --tensor_parallel splits a language model's
// vocabulary as ddpx train does.
template <typename Into>
void apply_vocab(const ParallelOptions& o, Into& into) {
  into.vocab_divisible_by = o.vocab_divisible_by;
}

}  // namespace

void add_parallel_flags(CLI::App* cmd, ParallelOptions& o, unsigned which) {
  std::vector<CLI::Option*> added;
  if (which & kShardFlag) {
    added.push_back(add_choice(cmd, "--shard", o.shard, parallel::kShardModeNames,
                               "sharded data parallel: none (DDP) | optimizer (ZeRO-1) | "
                               "gradients (ZeRO-2) | full (ZeRO-3/FSDP: parameters too)"));
  }
  if (which & kShardUnitsFlags) {
    added.push_back(
        cmd->add_option("--shard_units", o.shard_units,
                        "with --shard: submodules gathered together, comma-separated dotted paths "
                        "(default: every block of the model's Sequential containers)")
            ->delimiter(','));
    added.push_back(add_choice(
        cmd, "--shard_gather_dtype", o.shard_gather_dtype, train::kGatherDtypeNames,
        "with --shard: what the all-gathers send: auto (--amp's dtype, else fp32) | fp32 | bf16 | "
        "fp16 (half the bytes; the optimizer still steps fp32 shards)"));
  }
  if (which & kMeshSizeFlags) {
    added.push_back(cmd->add_option("--pipeline_parallel", o.pipeline_parallel,
                                    "pipeline stages a data-parallel replica: the world is P "
                                    "stages x N/P replicas (1: no pipeline)"));
  }
  if (which & kPipelineFlags) {
    added.push_back(cmd->add_option("--microbatches", o.microbatches,
                                    "a pipeline's micro-batches a batch (0: 2 x the stages, or "
                                    "the stages where only they divide the batch)"));
    added.push_back(add_choice(cmd, "--pipeline_schedule", o.pipeline_schedule,
                               parallel::kPipelineScheduleNames,
                               "a pipeline's schedule: gpipe | 1f1b | interleaved "
                               "(--stages_per_rank stages a rank)"));
    added.push_back(cmd->add_option("--stages_per_rank", o.stages_per_rank,
                                    "with --pipeline_schedule interleaved: stages a rank (0: 2)"));
    added.push_back(add_choice(cmd, "--pipeline_balance", o.pipeline_balance,
                               parallel::kPipelineBalanceNames,
                               "how a pipeline's stages are cut: time (each layer's forward and "
                               "backward, timed at start) | params (parameter counts)"));
  }
  if (which & kMeshSizeFlags) {
    added.push_back(cmd->add_option(
        "--tensor_parallel", o.tensor_parallel,
        "ranks that split each layer of a ViT, a GPT, BERT or the MLP (Megatron-style: heads, "
        "MLP width, a language model's vocabulary): the world is N/T data-parallel replicas of "
        "T ranks (1: none)"));
  }
  if (which & (kMeshSizeFlags | kVocabFlag)) {
    added.push_back(cmd->add_option(
        "--vocab_divisible_by", o.vocab_divisible_by,
        "with --tensor_parallel on a GPT or BERT: the vocabulary padded to a multiple of this x "
        "T (Megatron's --make-vocab-size-divisible-by); the padded rows are never predicted and "
        "never saved"));
  }
  if (which & kSequenceParallelFlag) {
    added.push_back(cmd->add_flag(
        "--sequence_parallel", o.sequence_parallel,
        "with --tensor_parallel on a ViT, a GPT or BERT: LayerNorms, dropouts and residuals over "
        "1/T of the tokens a rank (all-gathers and reduce-scatters instead of all-reduces)"));
  }
  if (which & kCheckpointingFlag) {
    added.push_back(cmd->add_option(
        "--activation_checkpointing", o.activation_checkpointing,
        "none | blocks (recompute every block's forward in backward: less activation memory, "
        "more time) | blocks:N (the first N blocks) | every:K (every K-th block)"));
  }
  for (CLI::Option* option : added) option->group(kParallelGroup);
}

void apply_parallel_options(const ParallelOptions& o, train::TrainOptions& into) {
  apply_common(o, into);
  apply_vocab(o, into);
  into.shard_units = o.shard_units;
  into.shard_gather_dtype = o.shard_gather_dtype;
  into.activation_checkpointing = o.activation_checkpointing;
}

void apply_parallel_options(const ParallelOptions& o, bench::TrainBenchOptions& into) {
  apply_common(o, into);
  apply_vocab(o, into);
  into.shard_units = o.shard_units;
  into.shard_gather_dtype = o.shard_gather_dtype;
  into.activation_checkpointing = o.activation_checkpointing;
}

void apply_parallel_options(const ParallelOptions& o, bench::ShardMemoryOptions& into) {
  apply_common(o, into);
  apply_vocab(o, into);
  into.activation_checkpointing = o.activation_checkpointing;
}

}  // namespace ddpx::cli
