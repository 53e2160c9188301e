// A checkpoint written sharded, and the loads that take either kind (see sharded_checkpoint.h).
#include "train/sharded_checkpoint.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_file.h"

namespace ddpx::train {

parallel::ShardedParts read_parts(const std::string& folder, const torch::Device& device) {
  parallel::ShardedParts parts;
  parts.name = folder;
  auto top = open_index(folder, device);
  try {
    top.read("sharded", parts.index);
  } catch (const std::exception& e) {
    fail_undecodable(index_file(folder), e);
  }
  const int world = layout_world_size(parts.index, index_file(folder));
  for (int q = 0; q < world; ++q) {
    const std::string file = part_file(folder, q, world);
    DDPX_CHECK(std::filesystem::exists(file), ErrorKind::kData,
               "{}: rank {}'s part {} is missing; the checkpoint cannot be resumed, use an older "
               "one",
               folder, q, file);
    parts.parts.push_back(open_framed_file(file, device));
  }
  return parts;
}

void save_sharded_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                             const TrainPosition& position, const CheckpointMeta& meta,
                             torch::nn::Module* ema, int rank, int world_size,
                             const std::function<void()>& barrier) {
  namespace fs = std::filesystem;
  const std::string partial = partial_folder(path);
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(partial, ec);  // what a crash mid-save left
    fs::create_directories(partial);
  }
  barrier();
  {
    torch::serialize::OutputArchive part;
    plan.write_part(part);
    write_framed_archive(part_file(partial, rank, world_size), part);
  }
  barrier();  // every part is on disk
  if (rank != 0) return;
  for (int q = 0; q < world_size; ++q) {
    DDPX_CHECK(fs::exists(part_file(partial, q, world_size)), ErrorKind::kIo,
               "{}: rank {}'s part is not there, though rank {} wrote it: --save_dir must be one "
               "folder every node sees (a shared file system), or save whole checkpoints with "
               "--checkpoint_format whole",
               partial, q, q);
  }
  torch::serialize::OutputArchive index, layout;
  plan.write_index(layout);
  index.write("sharded", layout);
  write_run_state(index, position, meta, ema, model_device(plan));
  write_framed_archive(index_file(partial), index);
  std::error_code ec;
  fs::remove_all(path, ec);  // an older checkpoint of the same name (a snapshot taken again)
  fs::rename(partial, path);
}

// Reads the file's model and optimizer archives into `load` (a plan's load_state_dict()); the
// tensors land on `device`, the model's: each rank loads onto the device its model is on.
TrainPosition load_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                              const CheckpointMeta& meta, torch::nn::Module* ema) {
  const torch::Device device = model_device(plan);
  if (is_sharded_checkpoint(path)) {
    // The whole state from every rank's part, through the plan's own load (any world size).
    auto load = [&](torch::serialize::InputArchive&) {
      parallel::ShardedParts parts = read_parts(path, device);
      torch::serialize::OutputArchive model, optimizer;
      parallel::assemble_whole(parts, plan.optimizer_factory(), model, optimizer);
      auto model_in = parallel::reopen(model, device);
      auto optimizer_in = parallel::reopen(optimizer, device);
      plan.load_state_dict(model_in, optimizer_in);
    };
    return read_run_state(read_file(index_file(path)), index_file(path), load, device, meta, ema);
  }
  auto load = [&](torch::serialize::InputArchive& m, torch::serialize::InputArchive& o) {
    plan.load_state_dict(m, o);
  };
  return read_run_state(read_file(path), path, whole_loader(load), device, meta, ema);
}

void load_checkpoint_weights(const std::string& path, torch::nn::Module& model) {
  torch::serialize::InputArchive model_archive;
  if (is_sharded_checkpoint(path)) {
    parallel::ShardedParts parts = read_parts(path, torch::kCPU);
    torch::serialize::OutputArchive whole;
    parallel::assemble_model(parts, whole);
    model_archive = parallel::reopen(whole, torch::kCPU);
  } else {
    auto archive = open_framed_file(path);
    try {
      archive.read("model", model_archive);
    } catch (const std::exception& e) {
      fail_undecodable(path, e);
    }
  }
  try {
    model.load(model_archive);
  } catch (const std::exception& e) {
    fail(ErrorKind::kData, "{} does not match this model: {}", path, message_of(e));
  }
}

}  // namespace ddpx::train
