#include "core/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace ddpx {
namespace {

// The first record of every event file; readers use it to pick the format version.
constexpr char kFileVersion[] = "brain.Event:2";
constexpr uint32_t kCrcMaskDelta = 0xa282ead8;

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// TFRecord stores a rotated CRC: a CRC of data that itself contains CRCs is then less likely to
// collide (the reason TensorFlow and LevelDB give).
uint32_t masked_crc32c(const std::string& bytes) {
  uint32_t crc = detail::crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta;
}

// Little-endian whatever the host's byte order, as TFRecord and protobuf want.
void put_fixed(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

// tensorflow.Event { double wall_time = 1; int64 step = 2; string file_version = 3;
// Summary summary = 5; }: the header of every event, with the wall time of now.
std::string event_header(int64_t step) {
  double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string event;
  put_double(event, 1, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: negatives take 10 bytes
  return event;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// The last part of the file name, as in PyTorch's SummaryWriter: two writers of one process
// started in the same second get different files.
std::atomic<int> next_writer_id{0};

}  // namespace

namespace detail {

uint32_t crc32c(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

}  // namespace detail

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  DDPX_CHECK(!error, ErrorKind::kUsage,
             "--tensorboard {}: cannot create the directory: {}; give a writable directory",
             log_dir, error.message());
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  path_ = (std::filesystem::path(log_dir) / fmt::format("events.out.tfevents.{}.{}.{}.{}", seconds,
                                                        hostname(), static_cast<long>(::getpid()),
                                                        next_writer_id.fetch_add(1)))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  DDPX_CHECK(file_ != nullptr, ErrorKind::kUsage,
             "--tensorboard {}: cannot create {}: {}; give a writable directory", log_dir, path_,
             std::strerror(errno));
  std::string event = event_header(/*step=*/0);
  put_bytes(event, 3, kFileVersion);
  try {
    write_event(event);
  } catch (...) {
    std::fclose(file_);  // no destructor runs for a constructor that throws
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  // A destructor must not throw; the last add_* call already flushed and reported errors.
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalars(step, {{tag, value}});
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty()) return;
  // tensorflow.Summary { repeated Value value = 1; }, Value { string tag = 1;
  // float simple_value = 2; }: simple_value is what TensorBoard's scalar dashboard reads.
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string entry;
    put_bytes(entry, 1, tag);
    put_float(entry, 2, static_cast<float>(value));
    put_bytes(summary, 1, entry);
  }
  std::string event = event_header(step);
  put_bytes(event, 5, summary);
  write_event(event);
}

void TensorBoardWriter::flush() {
  DDPX_CHECK(std::fflush(file_) == 0, ErrorKind::kIo, "writing {} failed: {}", path_,
             std::strerror(errno));
}

// TFRecord framing: uint64 length, masked CRC of the length, payload, masked CRC of the payload.
void TensorBoardWriter::write_event(const std::string& event) {
  std::string length;
  put_fixed(length, event.size(), 8);
  std::string record = length;
  put_fixed(record, masked_crc32c(length), 4);
  record += event;
  put_fixed(record, masked_crc32c(event), 4);
  DDPX_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(), ErrorKind::kIo,
             "writing {} failed: {}", path_, std::strerror(errno));
  flush();
}

}  // namespace ddpx
