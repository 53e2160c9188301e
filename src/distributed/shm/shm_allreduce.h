// An intra-node all-reduce over POSIX shared memory, for CPU tensors of ranks on one host.
//
// Why: on one host Gloo moves every byte through loopback TCP (two kernel copies each way);
// here each rank touches each byte about twice, so a 2-rank all-reduce runs at close to the
// memory-copy speed of a core (docs/performance.md has the figures).
//
// Contract: collective and blocking. Every rank of the group calls allreduce_sum with a tensor
// of the same dtype and element count, in the same order; ranks that do not all throw
// ddpx::Error(kDist) naming each rank's call. One call at a time per object (the
// owner, ShmBackend, serialises them on its communication thread). A rank that does not arrive
// within `timeout` makes the others throw ddpx::Error(kTimeout) naming the ranks that are
// behind. The segment is unlinked as soon as every rank has mapped it, so nothing is left in
// /dev/shm even when a job is killed.
//
// Every call starts with a barrier after which each rank checks the others' calls. Then:
// - In place, when every rank's tensor lies in its arena (arena(): gradient buckets are
//   allocated there): rank r reads part r of every rank's tensor and writes the result into
//   every rank's tensor; barrier. Each byte is read once and written once per rank.
// - Otherwise, per chunk of at most kChunkBytes, with the chunk split into one part per rank:
//   1. each rank copies the parts that other ranks reduce into its slot;   barrier
//   2. rank r sums part r of its own tensor and every peer's slot, writing the sum into its
//      tensor and into its slot;                                           barrier
//   3. each rank copies every other part's sum from its owner's slot.
//   Slots are double-buffered, so chunk k+1 may start while peers still read chunk k.
// An average is the sum times 1/world_size, computed in the same pass.
//
// Reduce-scatter and all-gather (shm_reduce_scatter.cpp, shm_allgather.cpp) take the same two
// routes: straight from the peers' arenas when every rank's input lies in its arena (then a
// closing barrier keeps the inputs until every rank has read them), else per round through
// the slots, one barrier a round. Reduce-scatter: rank r publishes the parts the others own
// and sums its own part from every slot and its own input: each rank writes (N-1)/N of its
// input once, where an all-reduce of it would move it twice. All-gather: each rank copies its
// input into its slot once and reads every peer's.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "distributed/shm/shm_arena.h"

namespace c10d {
class Store;
}

namespace ddpx::dist {

class ShmAllreduce {
 public:
  static constexpr int64_t kChunkBytes = int64_t{4} << 20;
  static constexpr int kMaxRanks = 64;

  // Collective over the store. Returns null on every rank when the ranks are not all on this
  // host (compared by boot id and host name) or shared memory cannot be had; the caller then
  // keeps using Gloo. Each rank's arena gets an equal share of /dev/shm's size (address space
  // only: pages are taken per allocation); DDPX_SHM_ARENA=0 gives no arena.
  static std::unique_ptr<ShmAllreduce> create(c10d::Store& store, int rank, int world_size,
                                              std::chrono::milliseconds timeout);
  ~ShmAllreduce();

  // In-place sum (or average) across ranks of a contiguous CPU float32 or float64 tensor.
  void allreduce(torch::Tensor& tensor, bool average = false);
  static bool supports(const torch::Tensor& tensor);

  // Reduce-and-apply: instead of summing, hands this rank's part of the element range,
  // [lo, lo + n), to `apply` with every rank's tensor (sources[0] this rank's, then the peers'
  // in rank order); `apply` reads them and writes wherever it was set up to (the sharded SGD
  // step: averaged gradient -> parameters and momentum). Every rank's tensor must lie in its
  // arena (else kDist on every rank). Returns once every rank has applied its part.
  using ApplyFn =
      std::function<void(int64_t lo, int64_t n, const std::vector<const void*>& sources)>;
  void allreduce_apply(torch::Tensor& tensor, const ApplyFn& apply);

  // Gather-and-apply, the all-gather's counterpart of reduce-and-apply: hands `read` every
  // rank's `tensor` (sources[q] rank q's, this rank's own included), each lying in its
  // rank's arena, to copy wherever it was set up to (a sharded unit's shards straight into its
  // parameters, with no gathered buffer between); returns once every rank has read. Every
  // rank's tensor must have the same dtype and size and lie in its arena (else kDist on every
  // rank).
  using ReadFn = std::function<void(const std::vector<const void*>& sources)>;
  void gather_apply(const torch::Tensor& tensor, const ReadFn& read);

  // Root's bytes into every rank's tensor (contiguous CPU, any dtype), through root's slots.
  void broadcast(torch::Tensor& tensor, int root);
  static bool supports_broadcast(const torch::Tensor& tensor);

  // Reduce-scatter: `input` is world_size parts of output.numel() elements; rank r's `output`
  // gets the sum (or average) over the ranks of part r. Sums are taken in rank order
  // ((x0 + x1) + x2 ...), so the result does not depend on which rank computes it; bfloat16
  // and float16 are summed in float and rounded once. Needs takes_reduce_scatter().
  void reduce_scatter(torch::Tensor& output, const torch::Tensor& input, bool average = false);
  // Contiguous CPU tensors of one dtype (float32, float64, bfloat16, float16), input
  // world_size times output's numel, output disjoint from input or exactly its part rank().
  bool takes_reduce_scatter(const torch::Tensor& output, const torch::Tensor& input) const;

  // All-gather: `output` is world_size parts of input.numel() elements; part r gets rank r's
  // input. Needs takes_all_gather().
  void all_gather(torch::Tensor& output, const torch::Tensor& input);
  // Contiguous CPU tensors of one dtype (any), output world_size times input's numel, input
  // disjoint from output or exactly its part rank() (the gather-in-place of a flat shard).
  bool takes_all_gather(const torch::Tensor& output, const torch::Tensor& input) const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // This rank's share of the segment; null when there is none.
  const std::shared_ptr<ShmArena>& arena() const { return arena_; }
  // Where rank r's arena starts in this process's mapping (peers write there directly).
  char* arena_of(int rank) const { return mapping_->at(arena_begin_ + rank * arena_bytes_); }
  // A tensor over `numel` elements of `dtype` at `offset` in rank r's arena (rank r allocated
  // them with peers_map_it): reads and writes go straight to the memory rank r uses.
  torch::Tensor peer_tensor(int rank, size_t offset, int64_t numel, c10::ScalarType dtype) const;
  // Collective: returns once every rank has called it (or throws kTimeout naming who did not).
  void barrier();

  // Collectives this rank has run over shared memory so far.
  int64_t calls() const { return calls_; }
  // Calls so far that every rank made with a tensor in its arena (reduced without copies).
  int64_t calls_in_place() const { return calls_in_place_; }

 private:
  struct Control;
  ShmAllreduce(std::shared_ptr<ShmMapping> mapping, size_t arena_begin, size_t arena_bytes,
               int rank, int world_size, std::chrono::milliseconds timeout);
  char* slot(int set, int rank) const;
  void check_calls_agree();
  bool all_in_arenas() const;
  // Unless all_in_arenas(): a barrier, then ddpx::Error(kDist) naming `what` and the setting
  // `fix` that turns the in-place op off, thrown alike on every rank.
  void require_in_arenas(const char* what, const char* fix);
  // Publishes this call's signature and where its `bytes` at `data` lie (in the arena or not),
  // waits for every rank and checks that all made the same call.
  void start_call(uint64_t signature, const void* data, int64_t bytes);
  // Where rank r's tensor of the current call lies in this mapping (all_in_arenas() only).
  const char* placed(int rank) const;
  template <typename T, typename Acc>
  void reduce_scatter_typed(T* out, const T* in, int64_t part, bool in_arenas, Acc scale);
  template <typename T>
  void reduce_in_place(int64_t count, T scale);
  template <typename T>
  void reduce_chunk(T* data, int64_t count, int set, T scale);

  std::shared_ptr<ShmMapping> mapping_;
  size_t arena_begin_;  // rank r's arena starts at arena_begin_ + r * arena_bytes_
  size_t arena_bytes_;
  std::shared_ptr<ShmArena> arena_;
  Control* control_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  int64_t chunks_done_ = 0;
  int64_t calls_ = 0;
  int64_t calls_in_place_ = 0;
};

}  // namespace ddpx::dist
