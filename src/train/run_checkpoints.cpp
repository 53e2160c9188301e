// A run's checkpoints (see run_checkpoints.h).
#include "train/run_checkpoints.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "distributed/context.h"

namespace ddpx::train {

RunCheckpoints::RunCheckpoints(const TrainOptions& options, dist::Context& context, RunState state)
    : o_(options), context_(context), state_(std::move(state)) {
  check_shared_save_dir();
}

bool RunCheckpoints::writes_parts() const {
  return o_.checkpoint_format != CheckpointFormat::kWhole && state_.plan->saves_sharded();
}

void RunCheckpoints::check_shared_save_dir() {
  if (o_.save_dir.empty() || context_.world_size() == 1 || !writes_parts()) return;
  namespace fs = std::filesystem;
  const std::string probe = o_.save_dir + "/.ddpx-shared-check";
  if (context_.rank() == 0) {
    std::error_code ec;
    fs::create_directories(o_.save_dir, ec);
    std::ofstream(probe) << "rank 0 of a ddpx job checks that every rank sees --save_dir\n";
  }
  context_.barrier();
  torch::Tensor missing = torch::zeros({context_.world_size()}, torch::kInt32);
  std::error_code ec;
  if (!fs::exists(probe, ec)) missing[context_.rank()] = 1;
  context_.all_reduce_sum(missing);
  context_.barrier();  // every rank has looked
  if (context_.rank() == 0) fs::remove(probe, ec);
  std::string ranks;
  for (int r = 0; r < context_.world_size(); ++r) {
    if (missing[r].item<int>() != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  DDPX_CHECK(ranks.empty(), ErrorKind::kUsage,
             "--save_dir {}: rank(s) {} do not see the file rank 0 wrote there; each rank writes "
             "its part of a checkpoint into it, so it must be one folder every node sees (a "
             "shared file system), or give --checkpoint_format whole (rank 0 writes one file)",
             o_.save_dir, ranks);
}

bool RunCheckpoints::has_ema() const { return state_.ema != nullptr && *state_.ema; }

torch::nn::Module* RunCheckpoints::ema_module() {
  if (!has_ema()) return nullptr;
  (*state_.ema)->assemble(*state_.plan, *state_.ema_model.ptr());  // collective
  return state_.ema_model.ptr().get();
}

TrainPosition RunCheckpoints::resume() {
  if (o_.resume.empty()) return {};
  std::string path = o_.resume;
  if (path == "auto") {
    auto found = find_latest_good_checkpoint(o_.save_dir);
    if (!found) {
      log::info("--resume auto: no checkpoint in {} yet, starting from scratch", o_.save_dir);
      return {};
    }
    path = *found;
  }
  DDPX_CHECK(std::filesystem::exists(path), ErrorKind::kUsage,
             "--resume {}: no such file or folder; give a checkpoint path or 'auto'", path);
  TrainPosition p = load_checkpoint(path, *state_.plan, state_.meta,
                                    has_ema() ? state_.ema_model.ptr().get() : nullptr);
  if (has_ema()) {
    auto& ema = *state_.ema;
    if (p.ema_updates >= 0) {
      // The whole average the file holds, cut into this rank's part as the plan cuts the model.
      ema->load(*state_.plan, *state_.ema_model.ptr());
      ema->set_updates(p.ema_updates);
    } else {
      // A checkpoint from a run without EMA: the average starts from the resumed weights.
      ema = std::make_unique<ModelEma>(held_tensors(*state_.plan), o_.ema_decay);
      log::info("--ema_decay: {} holds no EMA weights; the average starts from its weights", path);
    }
  }
  if (state_.scaler != nullptr && p.loss_scale > 0)
    state_.scaler->load(p.loss_scale, p.loss_scale_growth);
  if (p.epoch_step > 0) {
    log::info("resumed from {} at epoch {} step {} ({} steps in all)", path, p.epochs_done,
              p.epoch_step, p.global_step);
  } else {
    log::info("resumed from {} after {} epochs ({} steps)", path, p.epochs_done, p.global_step);
  }
  return p;
}

TrainPosition RunCheckpoints::position(int64_t epochs_done, int64_t epoch_step,
                                       int64_t global_step) const {
  TrainPosition position{epochs_done, global_step};
  position.epoch_step = epoch_step;
  if (state_.scaler != nullptr) {
    position.loss_scale = state_.scaler->current_scale();
    position.loss_scale_growth = state_.scaler->growth_tracker();
  }
  if (has_ema()) position.ema_updates = (*state_.ema)->updates();
  return position;
}

void RunCheckpoints::write(const std::string& path, const TrainPosition& position) {
  // Collective either way: the sharded plan's state_dict() gathers, its parts do not.
  if (writes_parts()) {
    save_sharded_checkpoint(path, *state_.plan, position, state_.meta, ema_module(),
                            context_.rank(), context_.world_size(), [this] { context_.barrier(); });
  } else {
    save_checkpoint(path, *state_.plan, position, state_.meta, ema_module(), context_.rank() == 0);
  }
}

void RunCheckpoints::save(int64_t epochs_done, int64_t global_step) {
  const bool writer = context_.rank() == 0;
  write(checkpoint_path(o_.save_dir, epochs_done), position(epochs_done, 0, global_step));
  if (writer) prune_checkpoints(o_.save_dir, o_.keep_checkpoints);
  context_.barrier();  // no rank runs ahead of a checkpoint it might resume from
}

void RunCheckpoints::snapshot(int64_t epoch, int64_t step, int64_t steps_per_epoch,
                              int64_t global_step, bool stop) {
  if (o_.save_dir.empty()) {
    if (context_.rank() == 0)
      log::warn("a snapshot was asked for, but this run has no --save_dir; none written");
  } else {
    const bool writer = context_.rank() == 0;
    std::string path = snapshot_path(o_.save_dir, epoch, step);
    write(path, position(epoch, step, global_step));
    if (writer) {
      log::out("Snapshot - epoch {} step {}/{}: {}", epoch, step, steps_per_epoch, path);
      if (stop) log::out("Stopping after the snapshot; resume with --resume {}", path);
    }
  }
  context_.barrier();
}

}  // namespace ddpx::train
