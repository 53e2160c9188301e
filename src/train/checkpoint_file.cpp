// The frame of every checkpoint file (see checkpoint_file.h).
#include "train/checkpoint_file.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/torch_file.h"

namespace ddpx::train {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'X', 'C', 'K', 'P', 'T'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4;

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

}  // namespace

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
torch::serialize::InputArchive open_framed_archive(const std::string& bytes,
                                                   const std::string& name, torch::Device device) {
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

torch::serialize::InputArchive open_framed_file(const std::string& path, torch::Device device) {
  return open_framed_archive(read_file(path), path, device);
}

void write_framed_archive(const std::string& path, torch::serialize::OutputArchive& archive) {
  std::ostringstream stream;
  archive.save_to(stream);
  const std::string payload = stream.str();
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

[[noreturn]] void fail_undecodable(const std::string& name, const std::exception& e) {
  if (auto* ours = dynamic_cast<const Error*>(&e)) throw *ours;
  fail(ErrorKind::kData, "{} passed its checksum but is not a ddpx checkpoint: {}", name,
       message_of(e));
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

std::string partial_folder(const std::string& path) { return path + ".partial"; }

std::string index_file(const std::string& folder) { return folder + "/index.ddpx"; }

std::string part_file(const std::string& folder, int rank, int world_size) {
  return fmt::format("{}/rank{:05d}-of-{:05d}.ddpx", folder, rank, world_size);
}

torch::serialize::InputArchive open_index(const std::string& folder, torch::Device device) {
  const std::string index = index_file(folder);
  DDPX_CHECK(std::filesystem::exists(index), ErrorKind::kData,
             "{} is a sharded checkpoint without its index ({}): it was not finished; use an "
             "older checkpoint",
             folder, index);
  return open_framed_file(index, device);
}

int layout_world_size(torch::serialize::InputArchive& layout, const std::string& name) {
  c10::IValue value;
  int64_t world = 0;
  try {
    if (layout.try_read("world_size", value) && value.isInt()) world = value.toInt();
  } catch (const std::exception& e) {
    fail_undecodable(name, e);
  }
  DDPX_CHECK(world >= 1 && world <= (1 << 20), ErrorKind::kData,
             "{}: the sharded checkpoint's index gives no usable world size", name);
  return static_cast<int>(world);
}

void verify_parts(const std::string& folder) {
  auto top = open_index(folder);
  torch::serialize::InputArchive layout;
  try {
    top.read("sharded", layout);
  } catch (const std::exception& e) {
    fail_undecodable(index_file(folder), e);
  }
  const int world = layout_world_size(layout, index_file(folder));
  for (int q = 0; q < world; ++q) {
    const std::string file = part_file(folder, q, world);
    DDPX_CHECK(std::filesystem::exists(file), ErrorKind::kData,
               "{}: rank {}'s part {} is missing; use an older checkpoint", folder, q, file);
    open_framed_file(file);
  }
}

}  // namespace ddpx::train
