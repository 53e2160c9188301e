#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "io/torch_file.h"

namespace ddpx::train {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'X', 'C', 'K', 'P', 'T'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4;
constexpr const char* kPrefix = "checkpoint_epoch";
constexpr const char* kSuffix = ".ddpx";

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T get(const std::string& in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

uint32_t crc32_of(const char* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// Returns the verified payload of checkpoint bytes; `name` (the file) labels errors.
std::string verified_payload(const std::string& bytes, const std::string& name) {
  DDPX_CHECK(bytes.size() >= kHeaderBytes && std::memcmp(bytes.data(), kMagic, 8) == 0,
             ErrorKind::kData,
             "{} is not a ddpx checkpoint (bad header); delete it or point "
             "--resume at another file",
             name);
  uint32_t version = get<uint32_t>(bytes, 8);
  DDPX_CHECK(version == kFormatVersion, ErrorKind::kData,
             "{} has checkpoint format {}, this ddpx reads {}", name, version, kFormatVersion);
  uint64_t size = get<uint64_t>(bytes, 12);
  DDPX_CHECK(bytes.size() - kHeaderBytes == size, ErrorKind::kData,
             "{} is truncated: {} payload bytes expected, {} present", name, size,
             bytes.size() - kHeaderBytes);
  uint32_t crc = get<uint32_t>(bytes, 20);
  DDPX_CHECK(crc32_of(bytes.data() + kHeaderBytes, size) == crc, ErrorKind::kData,
             "{} is corrupt (CRC-32 mismatch)", name);
  return bytes.substr(kHeaderBytes);
}

// libtorch's message without its C++ backtrace.
std::string message_of(const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// The checksum is the guard in front of libtorch's archive reader: only bytes that ddpx wrote
// (or that match their CRC-32) reach it. Past it, any libtorch error (a missing key, a value of
// the wrong type) still becomes a kData error naming the file.
// `device`: where the tensors land, as torch.load's map_location. Never the device each tensor
// was saved from (libtorch's default): a GPU checkpoint would fail to load on a CPU-only host
// (and `--resume auto` would skip it and start again), and every rank of a node would put it on
// GPU 0. So the host unless the caller places them (load_checkpoint: the model's device).
torch::serialize::InputArchive open_archive(const std::string& bytes, const std::string& name,
                                            torch::Device device = torch::kCPU) {
  std::string payload = verified_payload(bytes, name);
  // libtorch's zip reader leaks when it rejects an archive; ddpx's own zip check
  // (io/torch_file.h) rejects first what it would reject in its constructor.
  io::read_torch_zip(payload, name, "the checkpoint is damaged; use an older one");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(payload.data(), payload.size(), device);
  } catch (const std::exception& e) {  // c10::Error, or the TorchScript parser's errors
    fail(ErrorKind::kData, "{} passed its checksum but cannot be decoded: {}", name, message_of(e));
  }
  return archive;
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  return open_archive(read_file(path), path);
}

torch::Device model_device(torch::nn::Module& model) {
  const auto params = model.parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}
torch::Device model_device(parallel::Plan& plan) { return model_device(*plan.module().ptr()); }

[[noreturn]] void fail_undecodable(const std::string& name, const std::exception& e) {
  if (auto* ours = dynamic_cast<const Error*>(&e)) throw *ours;
  fail(ErrorKind::kData, "{} passed its checksum but is not a ddpx checkpoint: {}", name,
       message_of(e));
}

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

std::string checkpoint_path(const std::string& save_dir, int64_t epochs_done) {
  return fmt::format("{}/{}{:04d}{}", save_dir, kPrefix, epochs_done, kSuffix);
}

std::string snapshot_path(const std::string& save_dir, int64_t epochs_done, int64_t epoch_step) {
  return fmt::format("{}/{}{:04d}{}{:06d}{}", save_dir, kPrefix, epochs_done, kStepMark, epoch_step,
                     kSuffix);
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
  std::ostringstream stream;
  archive.save_to(stream);
  std::string payload = stream.str();

  std::string file;
  file.reserve(kHeaderBytes + payload.size());
  file.append(kMagic, 8);
  put<uint32_t>(file, kFormatVersion);
  put<uint64_t>(file, payload.size());
  put<uint32_t>(file, crc32_of(payload.data(), payload.size()));
  file += payload;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_file_atomic(path, file);
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

void save_checkpoint(const std::string& path, parallel::Plan& plan, const TrainPosition& position,
                     const CheckpointMeta& meta, torch::nn::Module* ema, bool write) {
  torch::serialize::OutputArchive model, optimizer;
  plan.state_dict(model, optimizer);  // collective: on every rank
  if (write) write_checkpoint(path, model, optimizer, position, meta, ema, model_device(plan));
}

// Reads the file's model and optimizer archives into `load` (a plan's load_state_dict()); the
// tensors land on `device`, the model's: each rank loads onto the device its model is on.
static TrainPosition read_checkpoint(const std::string& bytes, const std::string& name,
                                     const StateLoader& load, const torch::Device& device,
                                     const CheckpointMeta& meta, torch::nn::Module* ema) {
  auto archive = open_archive(bytes, name, device);
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
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    try {
      load(model_archive, optimizer_archive);
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
  return read_checkpoint(bytes, name, load, model_device(model), meta, ema);
}

TrainPosition load_checkpoint(const std::string& path, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                              torch::nn::Module* ema) {
  return load_checkpoint_bytes(read_file(path), path, model, optimizer, meta, ema);
}

TrainPosition load_checkpoint(const std::string& path, parallel::Plan& plan,
                              const CheckpointMeta& meta, torch::nn::Module* ema) {
  auto load = [&](torch::serialize::InputArchive& m, torch::serialize::InputArchive& o) {
    plan.load_state_dict(m, o);
  };
  return read_checkpoint(read_file(path), path, load, model_device(plan), meta, ema);
}

void verify_checkpoint(const std::string& path) { open_archive(path); }

CheckpointMeta read_checkpoint_meta_bytes(const std::string& bytes, const std::string& name) {
  auto archive = open_archive(bytes, name);
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
  } catch (const std::exception& e) {
    fail_undecodable(name, e);
  }
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  return read_checkpoint_meta_bytes(read_file(path), path);
}

void verify_checkpoint_bytes(const std::string& bytes, const std::string& name) {
  open_archive(bytes, name);
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
    std::filesystem::remove(path, ec);
  }
}

void load_checkpoint_weights(const std::string& path, torch::nn::Module& model) {
  auto archive = open_archive(path);
  torch::serialize::InputArchive model_archive;
  try {
    archive.read("model", model_archive);
  } catch (const std::exception& e) {
    fail_undecodable(path, e);
  }
  try {
    model.load(model_archive);
  } catch (const std::exception& e) {
    fail(ErrorKind::kData, "{} does not match this model: {}", path, message_of(e));
  }
}

}  // namespace ddpx::train
