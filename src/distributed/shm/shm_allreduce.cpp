#include "distributed/shm/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/env.h"
#include "core/error.h"

namespace ddpx::dist {
namespace {

constexpr size_t kControlBytes = 8192;
constexpr int kSpinIterations = 4000;  // ~10 us of polling before sleeping in the kernel
constexpr const char* kKeyPrefix = "ddpx/shm/";
constexpr uint64_t kNowhere = ~uint64_t{0};  // Control::places: the tensor is not in an arena
constexpr size_t kArenaAlignment = size_t{2} << 20;
constexpr size_t kMaxArenaBytes = size_t{64} << 30;

// Each rank's arena: an equal share of /dev/shm's size (the segment is sparse, so this is
// address space; an allocation takes pages and fails cleanly when /dev/shm is full).
size_t arena_bytes_per_rank(int world_size) {
  if (env::get_or("DDPX_SHM_ARENA", "1") == "0") return 0;
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) return 0;
  size_t share = static_cast<size_t>(fs.f_blocks) * fs.f_frsize / static_cast<size_t>(world_size);
  return std::min(share, kMaxArenaBytes) / kArenaAlignment * kArenaAlignment;
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string from_bytes(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Identifies this host and boot: ranks that share it can share memory.
std::string host_identity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return boot_id + "/" + host;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// One call in one word: op << 58 | type << 56 | root << 48 | count, where op is 0 sum,
// 1 average, 2 broadcast, 3 reduce-and-apply; type 1 float32, 2 float64, 3 bytes (broadcast); count
// elements or bytes.
enum : uint64_t { kSum = 0, kAverage = 1, kBroadcast = 2, kApply = 3 };
uint64_t signature(uint64_t op, uint64_t type, int root, int64_t count) {
  return (op << 58) | (type << 56) | (static_cast<uint64_t>(root) << 48) |
         static_cast<uint64_t>(count);
}

std::string describe_signature(uint64_t sig) {
  const uint64_t op = sig >> 58, type = (sig >> 56) & 3, root = (sig >> 48) & 0xff;
  const std::string count = std::to_string(sig & ((uint64_t{1} << 48) - 1));
  if (op == kBroadcast) return "broadcast from " + std::to_string(root) + " bytes[" + count + "]";
  const char* name = op == kAverage ? "average " : op == kApply ? "reduce-and-apply " : "sum ";
  return std::string(name) + (type == 2 ? "double" : "float") + "[" + count + "]";
}

}  // namespace

struct ShmAllreduce::Control {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  alignas(64) std::atomic<uint64_t> passes[kMaxRanks];  // barriers entered, per rank
  // What each rank's current call reduces (signature()), compared after the first barrier:
  // ranks that disagree would otherwise sum unrelated bytes and return without an error.
  alignas(64) std::atomic<uint64_t> calls[kMaxRanks];
  // Where each rank's tensor of the current call lies in its arena, or kNowhere.
  alignas(64) std::atomic<uint64_t> places[kMaxRanks];
};
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(ShmAllreduce::kChunkBytes) == 8);

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(c10d::Store& store, int rank, int world_size,
                                                   std::chrono::milliseconds timeout) {
  static_assert(sizeof(Control) <= kControlBytes);
  if (world_size < 2 || world_size > kMaxRanks) return nullptr;
  const std::string prefix = kKeyPrefix;
  // 1. Are all ranks on this host? Every rank reads every identity, so all decide alike.
  std::string me = host_identity();
  store.set(prefix + "host/" + std::to_string(rank), to_bytes(me));
  bool same_host = true;
  for (int r = 0; r < world_size; ++r)
    same_host = same_host && from_bytes(store.get(prefix + "host/" + std::to_string(r))) == me;

  // 2. Rank 0 creates the segment: control block and chunk slots with their pages reserved
  //    now (a full /dev/shm is an error here, not a SIGBUS later), then every rank's arena,
  //    sparse. It publishes the name and the arena size.
  const size_t fixed = kControlBytes + 2 * static_cast<size_t>(world_size) * kChunkBytes;
  const size_t arena_begin = (fixed + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  if (rank == 0) {
    std::string published;
    if (same_host) {
      std::mt19937_64 rng(std::random_device{}());
      std::string candidate = "/ddpx-" + std::to_string(::getpid()) + "-" + std::to_string(rng());
      const size_t arena = arena_bytes_per_rank(world_size);
      int fd = ::shm_open(candidate.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) {
        const size_t total = arena_begin + static_cast<size_t>(world_size) * arena;
        if (::ftruncate(fd, static_cast<off_t>(total)) == 0 &&
            ::posix_fallocate(fd, 0, static_cast<off_t>(fixed)) == 0)
          published = candidate + " " + std::to_string(arena);
        else
          ::shm_unlink(candidate.c_str());
        ::close(fd);
      }
    }
    store.set(prefix + "name", to_bytes(published));
  }
  const std::string published = from_bytes(store.get(prefix + "name"));
  if (published.empty()) return nullptr;
  const std::string name = published.substr(0, published.find(' '));
  const size_t arena_bytes = std::stoull(published.substr(published.find(' ') + 1));
  const size_t bytes = arena_begin + static_cast<size_t>(world_size) * arena_bytes;

  // 3. Everyone maps it and says whether that worked; rank 0 unlinks once all have answered.
  //    The descriptor stays open: the arena reserves and frees pages through it.
  void* base = MAP_FAILED;
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd >= 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED) ::close(fd);
  }
  store.set(prefix + "mapped/" + std::to_string(rank), to_bytes(base != MAP_FAILED ? "1" : "0"));
  bool all_mapped = true;
  for (int r = 0; r < world_size; ++r)
    all_mapped = all_mapped && from_bytes(store.get(prefix + "mapped/" + std::to_string(r))) == "1";
  if (rank == 0) ::shm_unlink(name.c_str());
  auto mapping = base != MAP_FAILED ? std::make_shared<ShmMapping>(base, bytes, fd) : nullptr;
  if (!all_mapped) return nullptr;
  return std::unique_ptr<ShmAllreduce>(
      new ShmAllreduce(std::move(mapping), arena_begin, arena_bytes, rank, world_size, timeout));
}

ShmAllreduce::ShmAllreduce(std::shared_ptr<ShmMapping> mapping, size_t arena_begin,
                           size_t arena_bytes, int rank, int world_size,
                           std::chrono::milliseconds timeout)
    : mapping_(std::move(mapping)),
      arena_begin_(arena_begin),
      arena_bytes_(arena_bytes),
      control_(reinterpret_cast<Control*>(mapping_->base)),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout) {
  if (arena_bytes_ > 0)
    arena_ =
        std::make_shared<ShmArena>(mapping_, arena_begin_ + rank_ * arena_bytes_, arena_bytes_);
}

// The mapping itself goes with its last user: this object or a tensor in the arena.
ShmAllreduce::~ShmAllreduce() = default;

char* ShmAllreduce::slot(int set, int rank) const {
  return mapping_->at(kControlBytes +
                      (static_cast<size_t>(set) * world_size_ + rank) * kChunkBytes);
}

torch::Tensor ShmAllreduce::peer_tensor(int rank, size_t offset, int64_t numel,
                                        c10::ScalarType dtype) const {
  DDPX_CHECK(rank >= 0 && rank < world_size_ && arena_bytes_ > 0 &&
                 offset + numel * c10::elementSize(dtype) <= arena_bytes_,
             ErrorKind::kInternal, "no arena range of {} {} elements at {} for rank {}", numel,
             c10::toString(dtype), offset, rank);
  auto keep = mapping_;
  return torch::from_blob(
      arena_of(rank) + offset, {numel}, [keep](void*) {}, torch::TensorOptions().dtype(dtype));
}

void ShmAllreduce::barrier() {
  Control& c = *control_;
  uint32_t generation = c.generation.load(std::memory_order_acquire);
  uint64_t my_pass = c.passes[rank_].fetch_add(1, std::memory_order_relaxed) + 1;
  if (c.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(world_size_)) {
    c.arrived.store(0, std::memory_order_relaxed);
    c.generation.fetch_add(1, std::memory_order_release);
    futex(&c.generation, FUTEX_WAKE, INT_MAX, nullptr);
    return;
  }
  for (int i = 0; i < kSpinIterations; ++i) {
    if (c.generation.load(std::memory_order_acquire) != generation) return;
    cpu_relax();
  }
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (c.generation.load(std::memory_order_acquire) == generation) {
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      std::string behind;
      for (int r = 0; r < world_size_; ++r)
        if (c.passes[r].load(std::memory_order_relaxed) < my_pass)
          behind += (behind.empty() ? "" : ", ") + std::to_string(r);
      fail(ErrorKind::kTimeout,
           "shared-memory collective timed out after {} ms on rank {}: rank(s) {} did not "
           "arrive (stopped, or calling a different collective); raise --timeout if they are "
           "just slow",
           timeout_.count(), rank_, behind.empty() ? "?" : behind);
    }
    auto slice =
        std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(100));
    timespec ts{
        static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(slice).count()),
        static_cast<long>((slice % std::chrono::seconds(1)) / std::chrono::nanoseconds(1))};
    futex(&c.generation, FUTEX_WAIT, generation, &ts);
  }
}

void ShmAllreduce::check_calls_agree() {
  const uint64_t mine = control_->calls[rank_].load(std::memory_order_acquire);
  std::string ranks;
  bool agree = true;
  for (int r = 0; r < world_size_; ++r) {
    uint64_t theirs = control_->calls[r].load(std::memory_order_acquire);
    agree = agree && theirs == mine;
    ranks +=
        (r == 0 ? "" : ", ") + ("rank " + std::to_string(r) + " " + describe_signature(theirs));
  }
  DDPX_CHECK(agree, ErrorKind::kDist,
             "mismatched collectives on shared memory (rank {}): {}; every rank must call the same "
             "collectives in the same order with the same shapes and dtypes",
             rank_, ranks);
}

bool ShmAllreduce::all_in_arenas() const {
  for (int r = 0; r < world_size_; ++r)
    if (control_->places[r].load(std::memory_order_acquire) == kNowhere) return false;
  return true;
}

template <typename T>
void ShmAllreduce::reduce_in_place(int64_t count, T scale) {
  const int world = world_size_;
  auto tensor_of = [&](int r) {
    return reinterpret_cast<T*>(mapping_->at(arena_begin_ + r * arena_bytes_ +
                                             control_->places[r].load(std::memory_order_relaxed)));
  };
  const int64_t lo = count * rank_ / world, n = count * (rank_ + 1) / world - lo;
  T* __restrict mine = tensor_of(rank_) + lo;
  if (world == 2) {  // read 2, write 2
    T* __restrict theirs = tensor_of(1 - rank_) + lo;
    for (int64_t i = 0; i < n; ++i) theirs[i] = mine[i] = (mine[i] + theirs[i]) * scale;
  } else {
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank_) continue;
      const T* __restrict src = tensor_of(peer) + lo;
      for (int64_t i = 0; i < n; ++i) mine[i] += src[i];
    }
    for (int64_t i = 0; i < n; ++i) mine[i] *= scale;
    for (int peer = 0; peer < world; ++peer)
      if (peer != rank_ && n > 0) std::memcpy(tensor_of(peer) + lo, mine, n * sizeof(T));
  }
  barrier();
}

template <typename T>
void ShmAllreduce::reduce_chunk(T* data, int64_t count, int set, T scale) {
  const int world = world_size_;
  auto begin = [&](int part) { return count * part / world; };
  T* mine = reinterpret_cast<T*>(slot(set, rank_));
  // 1. Publish the parts the other ranks reduce.
  for (int part = 0; part < world; ++part)
    if (part != rank_ && begin(part + 1) > begin(part))  // an empty tensor's data may be null
      std::memcpy(mine + begin(part), data + begin(part),
                  (begin(part + 1) - begin(part)) * sizeof(T));
  barrier();
  // 2. Reduce my part: my own values plus every peer's, in rank order; the sum goes to my
  //    tensor and to my slot, where the peers fetch it.
  const int64_t lo = begin(rank_), n = begin(rank_ + 1) - lo;
  T* __restrict out = data + lo;
  T* __restrict published = mine + lo;
  if (world == 2) {  // the common case in one pass: read 2, write 2
    const T* __restrict src = reinterpret_cast<const T*>(slot(set, 1 - rank_)) + lo;
    for (int64_t i = 0; i < n; ++i) published[i] = out[i] = (out[i] + src[i]) * scale;
  } else {
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank_) continue;
      const T* __restrict src = reinterpret_cast<const T*>(slot(set, peer)) + lo;
      for (int64_t i = 0; i < n; ++i) out[i] += src[i];
    }
    for (int64_t i = 0; i < n; ++i) out[i] *= scale;
    if (n > 0) std::memcpy(published, out, n * sizeof(T));
  }
  barrier();
  // 3. Fetch the other parts' sums from their owners.
  for (int part = 0; part < world; ++part)
    if (part != rank_ && begin(part + 1) > begin(part))
      std::memcpy(data + begin(part), reinterpret_cast<const T*>(slot(set, part)) + begin(part),
                  (begin(part + 1) - begin(part)) * sizeof(T));
}

bool ShmAllreduce::supports(const torch::Tensor& t) {
  return t.device().is_cpu() && t.layout() == torch::kStrided && t.is_contiguous() &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

void ShmAllreduce::allreduce(torch::Tensor& tensor, bool average) {
  DDPX_CHECK(supports(tensor), ErrorKind::kInternal,
             "shared-memory all-reduce got a {} tensor; it handles contiguous CPU float32/float64",
             tensor.toString());
  const int64_t total = tensor.numel();
  std::optional<size_t> place;
  if (arena_ && total > 0) place = arena_->locate(tensor.data_ptr(), total * tensor.element_size());
  control_->calls[rank_].store(signature(average ? kAverage : kSum,
                                         tensor.scalar_type() == torch::kFloat64 ? 2 : 1, 0, total),
                               std::memory_order_release);
  control_->places[rank_].store(place ? *place : kNowhere, std::memory_order_release);
  barrier();
  // A rank writes its next call's signature only after the last barrier of this call, which
  // every peer passes after this check: no peer can see a signature of the wrong call.
  check_calls_agree();
  if (total == 0) return barrier();  // so that no rank writes its next call before all checked
  const bool in_place = all_in_arenas();
  calls_in_place_ += in_place;
  auto run = [&](auto* data) {
    using T = std::remove_pointer_t<decltype(data)>;
    const T scale = average ? T(1) / static_cast<T>(world_size_) : T(1);
    if (in_place) return reduce_in_place<T>(total, scale);
    const int64_t per_chunk = kChunkBytes / static_cast<int64_t>(sizeof(T));
    for (int64_t offset = 0; offset < total; offset += per_chunk) {
      reduce_chunk<T>(data + offset, std::min(per_chunk, total - offset),
                      static_cast<int>(chunks_done_ & 1), scale);
      ++chunks_done_;
    }
  };
  if (tensor.scalar_type() == torch::kFloat32)
    run(tensor.data_ptr<float>());
  else
    run(tensor.data_ptr<double>());
}

void ShmAllreduce::allreduce_apply(torch::Tensor& tensor, const ApplyFn& apply) {
  DDPX_CHECK(supports(tensor), ErrorKind::kInternal,
             "shared-memory reduce-and-apply got a {} tensor; it handles contiguous CPU "
             "float32/float64",
             tensor.toString());
  const int64_t total = tensor.numel();
  std::optional<size_t> place;
  if (arena_ && total > 0) place = arena_->locate(tensor.data_ptr(), total * tensor.element_size());
  control_->calls[rank_].store(
      signature(kApply, tensor.scalar_type() == torch::kFloat64 ? 2 : 1, 0, total),
      std::memory_order_release);
  control_->places[rank_].store(place ? *place : kNowhere, std::memory_order_release);
  barrier();
  check_calls_agree();
  if (total == 0) return barrier();
  if (!all_in_arenas()) {
    barrier();  // every rank finds the same and throws alike
    fail(ErrorKind::kDist,
         "rank {}: a gradient bucket of reduce-and-apply is not in shared memory on every rank "
         "(/dev/shm full?); free /dev/shm or set DDPX_SHARDED_STEP=0",
         rank_);
  }
  ++calls_in_place_;
  std::vector<const void*> sources;
  auto tensor_of = [&](int r) {
    return mapping_->at(arena_begin_ + r * arena_bytes_ +
                        control_->places[r].load(std::memory_order_relaxed));
  };
  sources.push_back(tensor_of(rank_));
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) sources.push_back(tensor_of(r));
  const int64_t lo = total * rank_ / world_size_, hi = total * (rank_ + 1) / world_size_;
  std::exception_ptr error;
  try {
    if (hi > lo) apply(lo, hi - lo, sources);
  } catch (...) {
    error = std::current_exception();
  }
  barrier();  // every part is applied (and every rank checked this call's signatures)
  if (error) std::rethrow_exception(error);
}

bool ShmAllreduce::supports_broadcast(const torch::Tensor& t) {
  return t.device().is_cpu() && t.layout() == torch::kStrided && t.is_contiguous();
}

void ShmAllreduce::broadcast(torch::Tensor& tensor, int root) {
  DDPX_CHECK(supports_broadcast(tensor) && root >= 0 && root < world_size_, ErrorKind::kInternal,
             "shared-memory broadcast got a {} tensor from root {}; it handles contiguous CPU "
             "tensors from a rank of the group",
             tensor.toString(), root);
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  control_->calls[rank_].store(signature(kBroadcast, 3, root, bytes), std::memory_order_release);
  control_->places[rank_].store(kNowhere, std::memory_order_release);
  barrier();
  check_calls_agree();
  if (bytes == 0) return barrier();
  // Root's slot, chunk by chunk: root fills set k & 1, everyone else copies it out after the
  // barrier. Root refills a set two chunks later, after a barrier every reader passes only
  // once done with it.
  char* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t offset = 0; offset < bytes; offset += kChunkBytes) {
    const int64_t n = std::min<int64_t>(kChunkBytes, bytes - offset);
    char* slot_data = slot(static_cast<int>(chunks_done_ & 1), root);
    if (rank_ == root) std::memcpy(slot_data, data + offset, n);
    barrier();
    if (rank_ != root) std::memcpy(data + offset, slot_data, n);
    ++chunks_done_;
  }
  barrier();  // the slot may be reused by the next call once every reader is done
}

}  // namespace ddpx::dist
