// The pipeline's flags (--microbatches, --pipeline_schedule, --stages_per_rank,
// --pipeline_balance) and --activation_checkpointing, declared once for every command that
// takes them (ddpx train, bench train, bench memory, plan): one name, help and default each, and
// their automatic values chosen in one place (parallel/pipeline/pipeline_defaults.h), so what
// bench memory measures and plan predicts is what train runs. --pipeline_parallel stays with each
// command: what it sets differs (train's stages, plan searches them).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"

namespace ddpx::cli {

// Where a command keeps the flags' values.
struct PipelineFlags {
  int& microbatches;
  parallel::PipelineSchedule& schedule;
  int& stages_per_rank;
  parallel::PipelineBalance& balance;
};

// `scope` opens each flag's help: what it applies to ("with --pipeline_parallel", "pipeline
// meshes").
void add_pipeline_flags(CLI::App* cmd, const PipelineFlags& flags, const std::string& scope);

// --activation_checkpointing as ddpx train reads it (models/activation_checkpoint.h parses it).
CLI::Option* add_activation_checkpointing_flag(CLI::App* cmd, std::string& value);

}  // namespace ddpx::cli
