#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "train/checkpoint_file.h"

namespace ddpx::train {
namespace {

constexpr const char* kPrefix = "checkpoint_epoch";
constexpr const char* kSuffix = ".ddpx";

constexpr const char* kStepMark = "_step";

// {epochs, steps into the next epoch} from a checkpoint's file name; {-1, 0} when it is not
// one of ddpx's names.
std::pair<int64_t, int64_t> position_of(const std::string& filename) {
  if (filename.rfind(kPrefix, 0) != 0 ||
      filename.size() <= std::strlen(kPrefix) + std::strlen(kSuffix) ||
      filename.compare(filename.size() - std::strlen(kSuffix), std::string::npos, kSuffix) != 0)
    return {-1, 0};
  std::string stem = filename.substr(std::strlen(kPrefix));
  stem = stem.substr(0, stem.size() - std::strlen(kSuffix));
  std::string steps;
  if (size_t mark = stem.find(kStepMark); mark != std::string::npos) {
    steps = stem.substr(mark + std::strlen(kStepMark));
    stem = stem.substr(0, mark);
  }
  auto number = [](const std::string& text) -> int64_t {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return -1;
    try {
      return std::stoll(text);
    } catch (...) {
      return -1;
    }
  };
  int64_t epochs = number(stem);
  int64_t step = steps.empty() ? 0 : number(steps);
  if (epochs < 0 || step < 0) return {-1, 0};
  return {epochs, step};
}

bool is_snapshot_name(const std::string& filename) {
  return filename.find(kStepMark) != std::string::npos;
}

}  // namespace

torch::Device model_device(torch::nn::Module& model) {
  const auto params = model.parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}
torch::Device model_device(parallel::CheckpointState& plan) { return plan.device(); }

std::string checkpoint_path(const std::string& save_dir, int64_t epochs_done) {
  return fmt::format("{}/{}{:04d}{}", save_dir, kPrefix, epochs_done, kSuffix);
}

std::string snapshot_path(const std::string& save_dir, int64_t epochs_done, int64_t epoch_step) {
  return fmt::format("{}/{}{:04d}{}{:06d}{}", save_dir, kPrefix, epochs_done, kStepMark, epoch_step,
                     kSuffix);
}

// The run's state beside the model and optimizer: position, EMA, what the weights belong to,
// the RNG states. A whole checkpoint and a sharded one's index both hold it.
void write_run_state(torch::serialize::OutputArchive& archive, const TrainPosition& position,
                     const CheckpointMeta& meta, torch::nn::Module* ema,
                     const torch::Device& model_device) {
  archive.write("epochs_done", c10::IValue(position.epochs_done));
  archive.write("global_step", c10::IValue(position.global_step));
  if (position.epoch_step > 0) archive.write("epoch_step", c10::IValue(position.epoch_step));
  if (position.loss_scale > 0) {
    archive.write("loss_scale", c10::IValue(position.loss_scale));
    archive.write("loss_scale_growth", c10::IValue(position.loss_scale_growth));
  }
  if (ema != nullptr) {
    torch::serialize::OutputArchive ema_archive;
    ema->save(ema_archive);
    archive.write("ema", ema_archive);
    archive.write("ema_updates", c10::IValue(std::max<int64_t>(position.ema_updates, 0)));
  }
  archive.write("model_name", c10::IValue(meta.model));
  archive.write("num_classes", c10::IValue(meta.num_classes));
  archive.write("stem", c10::IValue(meta.stem));
  archive.write("image_size", c10::IValue(meta.image_size));
  archive.write("bias", c10::IValue(meta.bias));
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("cpu_rng_state", generator.get_state());
  }
  // The GPU's generator drives dropout and random augmentation on the device.
  if (model_device.is_cuda()) {
    auto generator = at::globalContext().defaultGenerator(model_device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("cuda_rng_state", generator.get_state());
  }
}

// The file from the model's and optimizer's archives (a plan's state_dict()).
static void write_checkpoint(const std::string& path,
                             torch::serialize::OutputArchive& model_archive,
                             torch::serialize::OutputArchive& optimizer_archive,
                             const TrainPosition& position, const CheckpointMeta& meta,
                             torch::nn::Module* ema, const torch::Device& model_device) {
  torch::serialize::OutputArchive archive;
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  write_run_state(archive, position, meta, ema, model_device);
  write_framed_archive(path, archive);
}

void save_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainPosition& position,
                     const CheckpointMeta& meta, torch::nn::Module* ema) {
  torch::serialize::OutputArchive model_archive, optimizer_archive;
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  write_checkpoint(path, model_archive, optimizer_archive, position, meta, ema,
                   model_device(model));
}

void save_checkpoint(const std::string& path, parallel::CheckpointState& plan,
                     const TrainPosition& position, const CheckpointMeta& meta,
                     torch::nn::Module* ema, bool write) {
  torch::serialize::OutputArchive model, optimizer;
  plan.state_dict(model, optimizer);  // collective: on every rank
  if (write) write_checkpoint(path, model, optimizer, position, meta, ema, model_device(plan));
}

TopLoader whole_loader(const StateLoader& load) {
  return [load](torch::serialize::InputArchive& archive) {
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    load(model_archive, optimizer_archive);
  };
}

TrainPosition read_run_state(const std::string& bytes, const std::string& name,
                             const TopLoader& load_state, const torch::Device& device,
                             const CheckpointMeta& meta, torch::nn::Module* ema) {
  auto archive = open_framed_archive(bytes, name, device);
  TrainPosition position;
  try {
    c10::IValue value;
    archive.read("model_name", value);
    DDPX_CHECK(value.toStringRef() == meta.model, ErrorKind::kData,
               "{} was written for --model {}, not {}; resume with the same model", name,
               value.toStringRef(), meta.model);
    archive.read("num_classes", value);
    DDPX_CHECK(value.toInt() == meta.num_classes, ErrorKind::kData,
               "{} was written for {} classes, this dataset has {}", name, value.toInt(),
               meta.num_classes);
    const bool bias = !archive.try_read("bias", value) || value.toBool();
    DDPX_CHECK(bias == meta.bias, ErrorKind::kData,
               "{} was written {} biases; resume with{} --no_bias", name, bias ? "with" : "without",
               bias ? "out" : "");
    try {
      load_state(archive);
      if (ema != nullptr && archive.try_read("ema_updates", value)) {
        position.ema_updates = value.toInt();
        torch::serialize::InputArchive ema_archive;
        archive.read("ema", ema_archive);
        ema->load(ema_archive);
      }
    } catch (const c10::Error& e) {
      fail(ErrorKind::kData, "{} does not match this model/optimizer: {}", name, message_of(e));
    }
    archive.read("epochs_done", value);
    position.epochs_done = value.toInt();
    archive.read("global_step", value);
    position.global_step = value.toInt();
    if (archive.try_read("epoch_step", value)) position.epoch_step = value.toInt();
    if (archive.try_read("loss_scale", value)) {
      position.loss_scale = value.toDouble();
      archive.read("loss_scale_growth", value);
      position.loss_scale_growth = value.toInt();
    }
    // The archive's tensors are on the model's device; generator states are host tensors.
    torch::Tensor rng_state;
    archive.read("cpu_rng_state", rng_state);
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state.cpu());
    // A GPU run's device generator, restored where the run goes on on a GPU (a CPU run has none
    // to restore; a GPU run from a CPU checkpoint keeps its seeded one).
    if (device.is_cuda() && archive.try_read("cuda_rng_state", rng_state)) {
      auto cuda_generator = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> cuda_lock(cuda_generator.mutex());
      cuda_generator.set_state(rng_state.cpu());
    }
  } catch (const std::exception& e) {
    fail_undecodable(name, e);
  }
  return position;
}

TrainPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                    const CheckpointMeta& meta, torch::nn::Module* ema) {
  auto load = [&](torch::serialize::InputArchive& m, torch::serialize::InputArchive& o) {
    model.load(m);
    optimizer.load(o);
  };
  return read_run_state(bytes, name, whole_loader(load), model_device(model), meta, ema);
}

TrainPosition load_checkpoint(const std::string& path, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                              torch::nn::Module* ema) {
  return load_checkpoint_bytes(read_file(path), path, model, optimizer, meta, ema);
}

void verify_checkpoint(const std::string& path) {
  if (is_sharded_checkpoint(path)) {
    verify_parts(path);
  } else {
    open_framed_file(path);
  }
}

CheckpointMeta read_checkpoint_meta_bytes(const std::string& bytes, const std::string& name) {
  auto archive = open_framed_archive(bytes, name);
  CheckpointMeta meta;
  try {
    c10::IValue value;
    archive.read("model_name", value);
    meta.model = value.toStringRef();
    archive.read("num_classes", value);
    meta.num_classes = value.toInt();
    archive.read("stem", value);
    meta.stem = value.toStringRef();
    archive.read("image_size", value);
    meta.image_size = value.toInt();
    if (archive.try_read("bias", value)) meta.bias = value.toBool();
  } catch (const std::exception& e) {
    fail_undecodable(name, e);
  }
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  const std::string file = is_sharded_checkpoint(path) ? index_file(path) : path;
  return read_checkpoint_meta_bytes(read_file(file), file);
}

void verify_checkpoint_bytes(const std::string& bytes, const std::string& name) {
  open_framed_archive(bytes, name);
}

std::vector<std::string> list_checkpoints(const std::string& save_dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(save_dir, ec)) {
    auto position = position_of(entry.path().filename().string());
    if (position.first >= 0) found.emplace_back(position, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(f.second);
  return paths;
}

std::optional<std::string> find_latest_good_checkpoint(const std::string& save_dir) {
  for (const auto& path : list_checkpoints(save_dir)) {
    try {
      verify_checkpoint(path);
      return path;
    } catch (const Error& e) {
      log::warn("skipping checkpoint: {}", e.what());
    }
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& save_dir, int keep) {
  size_t kept = 0;
  for (const auto& path : list_checkpoints(save_dir)) {
    if (is_snapshot_name(std::filesystem::path(path).filename().string())) continue;
    if (++kept <= static_cast<size_t>(keep)) continue;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // a file, or a sharded checkpoint's folder
  }
}

}  // namespace ddpx::train
