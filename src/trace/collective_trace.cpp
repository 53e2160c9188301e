// The collective ring and its file (see collective_trace.h).
#include "trace/collective_trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>

namespace ddpx::trace {
namespace {

constexpr char kMagic[8] = {'d', 'd', 'p', 'x', 't', 'r', 'c', '1'};
constexpr uint32_t kVersion = 2;  // 2: each record names its group

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void copy_name(char* out, size_t size, const char* in) {
  size_t n = std::min(std::strlen(in), size - 1);
  std::memcpy(out, in, n);
  out[n] = '\0';
}

}  // namespace

// One collective. `seq` is 0 while the record is being (re)written and is stored last, so a
// reader that sees the same non-zero seq before and after copying has a consistent record.
struct Record {
  std::atomic<uint64_t> seq;
  std::atomic<uint32_t> state;
  int32_t ndim;
  int64_t start_ns;
  std::atomic<int64_t> end_ns;
  int64_t tensors;
  int64_t dims[kMaxDims];
  char op[24];
  char dtype[16];
  char group[32];  // truncated past 31 characters
};

struct CollectiveTrace::File {
  char magic[8];
  uint32_t version;
  int32_t rank;
  int32_t world_size;
  int32_t pid;
  std::atomic<uint64_t> next_seq;
  Record ring[kRing];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the ring is shared between processes");

std::string Signature::text() const {
  if (tensors == 0) return op;
  std::string s = op + " " + dtype + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  s += "]";
  if (tensors != 1) s += " x" + std::to_string(tensors);
  return s;
}

int64_t Signature::bytes() const {
  static const std::pair<const char*, int64_t> kSizes[] = {
      {"float", 4}, {"double", 8}, {"half", 2}, {"bfloat16", 2}, {"long", 8},
      {"int", 4},   {"int16", 2},  {"int8", 1}, {"uint8", 1},    {"bool", 1}};
  int64_t element = 0;
  for (const auto& [name, size] : kSizes)
    if (dtype == name) element = size;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return numel * element * tensors;
}

std::string trace_path(const std::string& dir, int rank) {
  return fmt::format("{}/rank{}.trace", dir, rank);
}

CollectiveTrace::CollectiveTrace(const std::string& dir, int rank, int world_size)
    : rank_(rank), world_size_(world_size) {
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = trace_path(dir, rank);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && ::ftruncate(fd, sizeof(File)) == 0) {
      void* base = ::mmap(nullptr, sizeof(File), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base != MAP_FAILED) {
        file_ = new (base) File();
        mapped_ = true;
        dir_ = dir;
      }
    }
    if (fd >= 0) ::close(fd);
  }
  if (!file_) file_ = new File();
  file_->version = kVersion;
  file_->rank = rank;
  file_->world_size = world_size;
  file_->pid = static_cast<int32_t>(::getpid());
  // The magic goes last: a reader never takes a half-initialised file for a trace.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(file_->magic, kMagic, sizeof(kMagic));
}

CollectiveTrace::~CollectiveTrace() {
  if (mapped_) {
    ::munmap(file_, sizeof(File));  // the file stays, for the launcher and for post-mortems
  } else {
    delete file_;
  }
}

uint64_t CollectiveTrace::begin(const char* op, const char* dtype, const int64_t* shape, int ndim,
                                int64_t tensors, const char* group) {
  const uint64_t seq = file_->next_seq.fetch_add(1, std::memory_order_relaxed) + 1;
  Record& r = file_->ring[seq % kRing];
  r.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.state.store(static_cast<uint32_t>(State::kPending), std::memory_order_relaxed);
  r.ndim = std::min(ndim, kMaxDims);
  for (int i = 0; i < r.ndim; ++i) r.dims[i] = shape[i];
  r.tensors = tensors;
  r.start_ns = now_ns();
  r.end_ns.store(0, std::memory_order_relaxed);
  copy_name(r.op, sizeof(r.op), op);
  copy_name(r.dtype, sizeof(r.dtype), dtype);
  copy_name(r.group, sizeof(r.group), group);
  r.seq.store(seq, std::memory_order_release);
  return seq;
}

void CollectiveTrace::end(uint64_t seq, bool ok) {
  Record& r = file_->ring[seq % kRing];
  if (r.seq.load(std::memory_order_acquire) != seq) return;
  r.end_ns.store(now_ns(), std::memory_order_relaxed);
  r.state.store(static_cast<uint32_t>(ok ? State::kDone : State::kFailed),
                std::memory_order_release);
}

namespace {

Snapshot read_file(const CollectiveTrace::File& f) {
  Snapshot s;
  s.rank = f.rank;
  s.world_size = f.world_size;
  s.pid = f.pid;
  for (const Record& r : f.ring) {
    const uint64_t before = r.seq.load(std::memory_order_acquire);
    if (before == 0) continue;
    Entry e;
    e.seq = before;
    e.state = static_cast<State>(r.state.load(std::memory_order_acquire));
    e.start_ns = r.start_ns;
    e.end_ns = r.end_ns.load(std::memory_order_relaxed);
    e.sig.op.assign(r.op, strnlen(r.op, sizeof(r.op)));
    e.sig.dtype.assign(r.dtype, strnlen(r.dtype, sizeof(r.dtype)));
    e.sig.shape.assign(r.dims, r.dims + std::clamp(r.ndim, 0, kMaxDims));
    e.sig.tensors = r.tensors;
    e.group.assign(r.group, strnlen(r.group, sizeof(r.group)));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.seq.load(std::memory_order_relaxed) != before) continue;  // rewritten meanwhile
    s.entries.push_back(std::move(e));
  }
  std::sort(s.entries.begin(), s.entries.end(),
            [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  return s;
}

}  // namespace

Snapshot CollectiveTrace::snapshot() const { return read_file(*file_); }

std::string CollectiveTrace::bytes() const {
  return std::string(reinterpret_cast<const char*>(file_), sizeof(File));
}

void CollectiveTrace::exchange() {
  if (exchange_ && !exchanged_.exchange(true)) exchange_(bytes());
}

void write_remote_trace(const std::string& dir, int rank, const std::string& bytes) {
  std::string path = fmt::format("{}/rank{}.remote", dir, rank);
  std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  if (ok) ::rename(temp.c_str(), path.c_str());
}

std::optional<Snapshot> read_trace(const std::string& dir, int rank) {
  bool remote = false;
  int fd = ::open(trace_path(dir, rank).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fd = ::open(fmt::format("{}/rank{}.remote", dir, rank).c_str(), O_RDONLY | O_CLOEXEC);
    remote = true;
  }
  if (fd < 0) return std::nullopt;
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(CollectiveTrace::File)) {
    base = ::mmap(nullptr, sizeof(CollectiveTrace::File), PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (base == MAP_FAILED) return std::nullopt;
  const auto* f = static_cast<const CollectiveTrace::File*>(base);
  std::optional<Snapshot> out;
  if (std::memcmp(f->magic, kMagic, sizeof(kMagic)) == 0 && f->version == kVersion) {
    out = read_file(*f);
    out->remote = remote;
  }
  ::munmap(base, sizeof(CollectiveTrace::File));
  return out;
}

std::vector<Snapshot> read_traces(const std::string& dir, int world_size) {
  std::vector<Snapshot> out;
  int last = world_size > 0 ? world_size : 0;
  if (world_size <= 0) {  // every rank<K>.trace present
    std::error_code ec;
    for (const auto& item : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = item.path().filename().string();
      bool trace = name.size() > 10 && name.compare(name.size() - 6, 6, ".trace") == 0;
      bool remote = name.size() > 11 && name.compare(name.size() - 7, 7, ".remote") == 0;
      if (name.rfind("rank", 0) == 0 && (trace || remote)) {
        last = std::max(last, std::atoi(name.c_str() + 4) + 1);
      }
    }
  }
  for (int rank = 0; rank < last; ++rank) {
    if (auto s = read_trace(dir, rank)) out.push_back(std::move(*s));
  }
  return out;
}

}  // namespace ddpx::trace
