// The control block at the start of the shared-memory segment and the one-word description of a
// call that the ranks compare before they touch each other's bytes. Private to
// distributed/shm/: shm_setup.cpp lays the segment out, shm_sync.cpp waits and compares,
// shm_allreduce.cpp runs the collectives.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distributed/shm/shm_allreduce.h"

namespace ddpx::dist {

namespace shm_layout {

constexpr size_t kControlBytes = 8192;
constexpr uint64_t kNowhere = ~uint64_t{0};  // Control::places: the tensor is not in an arena

// One call in one word: op << 60 | type << 56 | root << 48 | count. op: 0 sum, 1 average,
// 2 broadcast, 3 reduce-and-apply, 4 reduce-scatter sum, 5 reduce-scatter average, 6 all-gather,
// 7 gather-and-apply;
// type: 1 float32, 2 float64, 3 bytes, 4 bfloat16, 5 float16; count: elements (of the input),
// or bytes for type 3.
enum : uint64_t {
  kSum = 0,
  kAverage = 1,
  kBroadcast = 2,
  kApply = 3,
  kReduceScatterSum = 4,
  kReduceScatterAverage = 5,
  kAllgather = 6,
  kGatherApply = 7,
};
enum : uint64_t { kFloat32 = 1, kFloat64 = 2, kBytes = 3, kBFloat16 = 4, kFloat16 = 5 };
// The type code of a dtype; kBytes for the ones that have none (all-gather copies any).
inline uint64_t type_code(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return kFloat32;
    case c10::kDouble:
      return kFloat64;
    case c10::kBFloat16:
      return kBFloat16;
    case c10::kHalf:
      return kFloat16;
    default:
      return kBytes;
  }
}
inline uint64_t signature(uint64_t op, uint64_t type, int root, int64_t count) {
  return (op << 60) | (type << 56) | (static_cast<uint64_t>(root) << 48) |
         static_cast<uint64_t>(count);
}

}  // namespace shm_layout

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

}  // namespace ddpx::dist
