// Checkpoints that cannot be lost. A checkpoint file is
//   "DDPXCKPT" | u32 format version | u64 payload bytes | u32 CRC-32 of payload | payload
// where the payload is a torch::serialize archive holding the model, the optimizer, the
// training position and the RNG states (the CPU's, and the GPU's of a GPU run). Files are written
// atomically (core/atomic_file.h), so a crash mid-write leaves the previous checkpoint intact; on
// load a wrong magic, a short file or a CRC mismatch is reported as corrupt, and `--resume auto`
// falls back to the newest checkpoint that verifies.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/plan.h"

namespace ddpx::train {

struct TrainPosition {
  int64_t epochs_done = 0;  // completed epochs
  int64_t global_step = 0;  // optimizer steps taken
  double loss_scale = 0;    // fp16 loss scaling's scale (0: none) and its clean-step count
  int64_t loss_scale_growth = 0;
  int64_t ema_updates = -1;  // --ema_decay: updates the average has had (-1: no EMA saved)
  // A snapshot taken mid-epoch: the steps already taken in epoch `epochs_done` (0: the epoch's
  // start). Resuming skips the batches of those steps (the sampler's order is the same).
  int64_t epoch_step = 0;
};

// What the weights belong to: enough to rebuild the model from the checkpoint alone.
struct CheckpointMeta {
  std::string model;
  int64_t num_classes = 0;
  std::string stem = "imagenet";
  int64_t image_size = 0;
  bool bias = true;  // a GPT's (--no_bias: false); true in files written before the flag
};

// The meta of a checkpoint file (verified first).
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Path of the checkpoint written after `epochs_done` epochs, and of a snapshot taken
// `epoch_step` steps into the next epoch (checkpoint_epoch0002_step000120.ddpx).
std::string checkpoint_path(const std::string& save_dir, int64_t epochs_done);
std::string snapshot_path(const std::string& save_dir, int64_t epochs_done, int64_t epoch_step);

// `ema`: the weights' moving average (--ema_decay), saved beside the model when given.
void save_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainPosition& position,
                     const CheckpointMeta& meta, torch::nn::Module* ema = nullptr);

// The same file from a parallel plan's full state (plan.h): state_dict() is collective, so every
// rank calls this; only where `write` (rank 0) is the file written.
void save_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                     const TrainPosition& position, const CheckpointMeta& meta,
                     torch::nn::Module* ema, bool write);

// The same state written sharded (sharded_checkpoint.h), for a plan that saves_sharded(): every
// rank writes its part, rank 0 the index; `barrier` is the job's (collective).
void save_sharded_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                             const TrainPosition& position, const CheckpointMeta& meta,
                             torch::nn::Module* ema, int rank, int world_size,
                             const std::function<void()>& barrier);

// Reads a checkpoint's model and optimizer archives (Module::load, Optimizer::load, or a plan's
// load_state_dict()).
using StateLoader = std::function<void(torch::serialize::InputArchive& model,
                                       torch::serialize::InputArchive& optimizer)>;

// Restores model, optimizer and RNG, the tensors on the device the model is on (a checkpoint
// saved on a GPU resumes on a CPU and the other way round; on GPU k, not on the GPU it was
// saved from); throws ddpx::Error(kData) naming the
// file when it is corrupt or was written for another model. `ema` is loaded when the file has
// one (position.ema_updates >= 0); otherwise it is left as it is.
TrainPosition load_checkpoint(const std::string& path, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                              torch::nn::Module* ema = nullptr);

// The same into a parallel plan (its load_state_dict(), on the device of its module()). `path`
// may be a sharded checkpoint's folder, written at any world size and shard mode.
TrainPosition load_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                              const CheckpointMeta& meta, torch::nn::Module* ema = nullptr);

// Throws kData when the file is not a complete, uncorrupted checkpoint. Reads it on the host
// (whatever device it was saved from), as do the meta and weights readers below.
void verify_checkpoint(const std::string& path);

// Checkpoints in save_dir (files and sharded folders; snapshots included), newest (most epochs,
// then steps) first.
std::vector<std::string> list_checkpoints(const std::string& save_dir);

// The newest checkpoint that verifies; corrupt ones are reported (warning) and skipped.
std::optional<std::string> find_latest_good_checkpoint(const std::string& save_dir);

// Deletes all but the newest `keep` per-epoch checkpoints; snapshots, taken on request, stay.
void prune_checkpoints(const std::string& save_dir, int keep);

// The same readers on bytes already in memory (`name` labels errors, as the path does above).
// They are what the fuzz target calls: any input gives a result or a ddpx::Error(kData).
void verify_checkpoint_bytes(const std::string& bytes, const std::string& name);
CheckpointMeta read_checkpoint_meta_bytes(const std::string& bytes, const std::string& name);
TrainPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                    const CheckpointMeta& meta, torch::nn::Module* ema = nullptr);

// The parts of a checkpoint file both kinds share (sharded_checkpoint.cpp writes an index with
// them): the run's state beside the model and optimizer (position, EMA, what the weights belong
// to, the RNG states), and its reading back, where `load_state(top)` reads the model and
// optimizer state out of the top archive.
using TopLoader = std::function<void(torch::serialize::InputArchive& top)>;
void write_run_state(torch::serialize::OutputArchive& archive, const TrainPosition& position,
                     const CheckpointMeta& meta, torch::nn::Module* ema,
                     const torch::Device& model_device);
TrainPosition read_run_state(const std::string& bytes, const std::string& name,
                             const TopLoader& load_state, const torch::Device& device,
                             const CheckpointMeta& meta, torch::nn::Module* ema);
// A whole checkpoint's loader: its "model" and "optimizer" archives into `load`.
TopLoader whole_loader(const StateLoader& load);
torch::Device model_device(torch::nn::Module& model);
torch::Device model_device(parallel::CheckpointState& plan);

// A model's weights only, from a checkpoint (for `ddpx export` and evaluation).
void load_checkpoint_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddpx::train
