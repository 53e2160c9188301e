// One rank's share of the shared-memory segment, handed out as tensors: gradient buckets that
// live here are all-reduced in place by ShmAllreduce, with no copy in or out (each rank reads
// its part of every rank's bucket and writes the result into every rank's bucket).
//
// The segment is a sparse file in /dev/shm (unlinked as soon as every rank has mapped it);
// an allocation reserves its pages with fallocate, so a full /dev/shm shows up here as an
// undefined tensor (the caller falls back to ordinary memory), never as a SIGBUS later. A
// freed range gives its pages back (hole punch) and reads as zeros when handed out again.
//
// Thread-safe. The mapping lives as long as the last tensor allocated here or the segment's
// owner, whichever is later.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace ddpx::dist {

// A mapped shared-memory file: unmapped and closed with the last owner.
struct ShmMapping {
  ShmMapping(void* base, size_t bytes, int fd) : base(base), bytes(bytes), fd(fd) {}
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  char* at(size_t offset) const { return static_cast<char*>(base) + offset; }

  void* base;
  size_t bytes;
  int fd;
};

class ShmArena : public std::enable_shared_from_this<ShmArena> {
 public:
  static constexpr size_t kAlignment = 4096;  // page: a freed range can be punched out

  // The arena is [offset, offset + bytes) of the mapping.
  ShmArena(std::shared_ptr<ShmMapping> mapping, size_t offset, size_t bytes);

  // A zero-filled 1-d tensor of `numel` elements of `dtype` in this arena, or an undefined
  // tensor when the arena or /dev/shm has no room for it. Its range is freed with the tensor,
  // unless `peers_map_it`: memory that other ranks read through their own views must not turn
  // to zeros under them when this rank lets go first, so it stays until the segment is gone.
  torch::Tensor allocate(int64_t numel, c10::ScalarType dtype, bool peers_map_it = false);

  // Where [data, data + bytes) lies in this arena (offset from its start), if it does.
  std::optional<size_t> locate(const void* data, size_t bytes) const;

  size_t bytes_in_use() const;

  // From now on, in every arena of this process (a job's group and its sub-groups each have
  // theirs), `counter(bytes)` when a tensor is handed out and `counter(-bytes)` when it is given
  // back (its requested bytes, as an allocator counts them): how bench memory counts these
  // tensors with the CPU allocator's (on a GPU they would be the allocator's too). Tensors
  // handed out before are not counted either way. Null stops counting.
  using Counter = void (*)(int64_t bytes);
  static void count_with(Counter counter) { counter_.store(counter); }

 private:
  void release(size_t offset, size_t bytes);

  std::shared_ptr<ShmMapping> mapping_;
  size_t offset_;
  size_t bytes_;
  mutable std::mutex mutex_;
  std::map<size_t, size_t> free_;  // offset in arena -> length, coalesced
  size_t in_use_ = 0;
  static inline std::atomic<Counter> counter_{nullptr};
};

}  // namespace ddpx::dist
