// Setting up the shared-memory all-reduce (see shm_allreduce.h): the ranks agree that they share
// a host, rank 0 creates the segment (control block, chunk slots, one arena per rank), every rank
// maps it, and it is unlinked once all have.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/env.h"
#include "core/error.h"
#include "distributed/shm/shm_allreduce.h"
#include "distributed/shm/shm_control.h"

namespace ddpx::dist {
namespace {

using shm_layout::kControlBytes;

constexpr const char* kKeyPrefix = "ddpx/shm/";
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

}  // namespace

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

}  // namespace ddpx::dist
