// A run's checkpoints: --resume (a path or `auto`), the checkpoint after every epoch
// (--save_dir, --keep_checkpoints) and snapshots asked for while training. The model and
// optimizer state come from the parallel plan's state_dict() (whole at any world size), or, for
// a sharded plan, from each rank's part (--checkpoint_format, sharded_checkpoint.h); beside it
// the position, the weights' EMA and fp16's loss scale.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <memory>
#include <string>

#include "optim/loss_scaler.h"
#include "parallel/plan.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/options.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::train {

// What a checkpoint saves and restores beside the plan; the pointers are the run's (null: off).
struct RunState {
  parallel::Plan* plan = nullptr;
  std::unique_ptr<ModelEma>* ema = nullptr;  // --ema_decay
  torch::nn::AnyModule ema_model;            // the average's own instance
  optim::LossScaler* scaler = nullptr;       // fp16
  CheckpointMeta meta;
};

class RunCheckpoints {
 public:
  // Collective: where the run writes checkpoints by parts, every rank checks that it sees the
  // folder rank 0 writes in (a --save_dir not shared across nodes is refused now, naming the
  // ranks, rather than at the first checkpoint).
  RunCheckpoints(const TrainOptions& options, dist::Context& context, RunState state);

  // Loads --resume into the plan (before training; every rank) and returns where the run goes
  // on: a zero position when there is nothing to resume.
  TrainPosition resume();

  // The checkpoint after `epochs_done` epochs (collective).
  void save(int64_t epochs_done, int64_t global_step);
  // A snapshot `step` steps into `epoch`, asked for while training (collective).
  void snapshot(int64_t epoch, int64_t step, int64_t steps_per_epoch, int64_t global_step,
                bool stop);

 private:
  TrainPosition position(int64_t epochs_done, int64_t epoch_step, int64_t global_step) const;
  bool writes_parts() const;
  void check_shared_save_dir();
  void write(const std::string& path, const TrainPosition& position);  // whole or sharded
  bool has_ema() const;
  // The whole average, assembled for a checkpoint (collective); null without --ema_decay.
  torch::nn::Module* ema_module();

  const TrainOptions& o_;
  dist::Context& context_;
  RunState state_;
};

}  // namespace ddpx::train
