// The pipeline's flags, declared once (see pipeline_flags.h).
#include "cli/pipeline_flags.h"

#include "cli/choices.h"

namespace ddpx::cli {

void add_pipeline_flags(CLI::App* cmd, const PipelineFlags& flags, const std::string& scope) {
  cmd->add_option("--microbatches", flags.microbatches,
                  scope +
                      ": micro-batches a batch (0: 2 x the stages, or the stages where only they "
                      "divide the batch)");
  add_choice(cmd, "--pipeline_schedule", flags.schedule, parallel::kPipelineScheduleNames,
             scope + ": gpipe | 1f1b | interleaved (--stages_per_rank stages a rank)");
  cmd->add_option("--stages_per_rank", flags.stages_per_rank,
                  "with --pipeline_schedule interleaved: stages a rank (0: 2)");
  add_choice(cmd, "--pipeline_balance", flags.balance, parallel::kPipelineBalanceNames,
             scope +
                 ": how the stages are cut: time (each layer's forward and backward, timed at "
                 "start) | params (parameter counts)");
}

CLI::Option* add_activation_checkpointing_flag(CLI::App* cmd, std::string& value) {
  return cmd->add_option("--activation_checkpointing", value,
                         "none | blocks (recompute every block's forward in backward: less "
                         "activation memory, more time) | blocks:N (the first N blocks) | "
                         "every:K (every K-th block)");
}

}  // namespace ddpx::cli
