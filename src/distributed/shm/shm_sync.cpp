// How the ranks of the shared-memory all-reduce wait for each other (see shm_allreduce.h): a
// barrier on the control block (spinning briefly, then sleeping on a futex, with a timeout that
// names the ranks behind), and the check that every rank makes the same call.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <optional>
#include <string>

#include "core/error.h"
#include "distributed/shm/shm_allreduce.h"
#include "distributed/shm/shm_control.h"

namespace ddpx::dist {
namespace {

using shm_layout::kAllgather;
using shm_layout::kApply;
using shm_layout::kAverage;
using shm_layout::kBFloat16;
using shm_layout::kBroadcast;
using shm_layout::kBytes;
using shm_layout::kFloat16;
using shm_layout::kFloat64;
using shm_layout::kGatherApply;
using shm_layout::kNowhere;
using shm_layout::kReduceScatterAverage;
using shm_layout::kReduceScatterSum;

constexpr int kSpinIterations = 4000;  // ~10 us of polling before sleeping in the kernel

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

std::string describe_signature(uint64_t sig) {
  const uint64_t op = sig >> 60, type = (sig >> 56) & 0xf, root = (sig >> 48) & 0xff;
  const std::string count = std::to_string(sig & ((uint64_t{1} << 48) - 1));
  if (op == kBroadcast) return "broadcast from " + std::to_string(root) + " bytes[" + count + "]";
  const char* name = op == kAverage                ? "average "
                     : op == kApply                ? "reduce-and-apply "
                     : op == kReduceScatterSum     ? "reduce-scatter sum "
                     : op == kReduceScatterAverage ? "reduce-scatter average "
                     : op == kAllgather            ? "all-gather "
                     : op == kGatherApply          ? "gather-and-apply "
                                                   : "sum ";
  const char* dtype = type == kFloat64    ? "double"
                      : type == kBytes    ? "bytes"
                      : type == kBFloat16 ? "bfloat16"
                      : type == kFloat16  ? "half"
                                          : "float";
  return std::string(name) + dtype + "[" + count + "]";
}

}  // namespace

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

void ShmAllreduce::start_call(uint64_t signature, const void* data, int64_t bytes) {
  std::optional<size_t> place;
  if (arena_ && bytes > 0) place = arena_->locate(data, static_cast<size_t>(bytes));
  control_->calls[rank_].store(signature, std::memory_order_release);
  control_->places[rank_].store(place ? *place : kNowhere, std::memory_order_release);
  ++calls_;
  barrier();
  // A rank writes its next call's signature only after a barrier of this call that every peer
  // passes after this check: no peer can see a signature of the wrong call.
  check_calls_agree();
}

const char* ShmAllreduce::placed(int rank) const {
  return mapping_->at(arena_begin_ + rank * arena_bytes_ +
                      control_->places[rank].load(std::memory_order_relaxed));
}

bool ShmAllreduce::all_in_arenas() const {
  for (int r = 0; r < world_size_; ++r)
    if (control_->places[r].load(std::memory_order_acquire) == kNowhere) return false;
  return true;
}

void ShmAllreduce::require_in_arenas(const char* what, const char* fix) {
  if (all_in_arenas()) return;
  barrier();  // every rank finds the same and throws alike
  fail(ErrorKind::kDist,
       "rank {}: {} is not in shared memory on every rank (/dev/shm full?); free /dev/shm or "
       "set {}",
       rank_, what, fix);
}

}  // namespace ddpx::dist
