// What a process group's transport can do beyond c10d's collectives, for the strategies that
// use it: memory each rank publishes for its peers to read and write directly, and collective
// steps over that memory that run in order with the group's collectives. A strategy asks the
// group for it (Context::peer_memory()) and takes the plain collective path where the answer is
// null: NCCL, Gloo, ranks on several hosts, one process. Today the shared-memory transport of
// ranks on one host offers it (shm_backend.h); `parallel/` knows only this interface.
//
// What it lets a strategy do:
// - allocate(): buffers that the group's all-reduce, reduce-scatter and all-gather read and write
//   without staging copies (gradient buckets, a sharded unit's shards and collective buffers),
//   and that peers can view (peer_view() at the offset_of() their owner publishes);
// - submit(): collective steps on the transport's own thread, in order with the collectives
//   queued before them: reduce-and-apply (each rank reduces its part of every rank's tensor and
//   hands it to a function instead of writing a sum back), gather-and-apply (each rank reads
//   every rank's published tensor where it lies, with no gathered buffer between), a barrier.
//
// Contract: allocate(), offset_of() and peer_view() are local and thread-safe. submit() is
// collective: every rank submits the same steps in the same order; the returned Work completes
// when the steps have run on this rank, and a failure (a timeout naming the ranks behind, a
// mismatch between ranks' calls) comes out of its wait() as on every other rank. The memory
// lives as long as the process group that offers it, or the last tensor allocated from it.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace c10d {
class Work;
}

namespace ddpx::dist {

// The collective steps a submitted op may take, on the transport's thread (PeerMemory::submit).
class PeerSteps {
 public:
  virtual ~PeerSteps() = default;

  // Reduce-and-apply: instead of summing, hands this rank's part of the element range,
  // [lo, lo + n), to `apply` with every rank's `tensor` (sources[0] this rank's, then the peers'
  // in rank order); `apply` reads them and writes wherever it was set up to. Every rank's
  // tensor must lie in its published memory (allocate()). Returns once every rank has applied
  // its part.
  using ApplyFn =
      std::function<void(int64_t lo, int64_t n, const std::vector<const void*>& sources)>;
  virtual void reduce_apply(torch::Tensor& tensor, const ApplyFn& apply) = 0;

  // Gather-and-apply: hands `read` every rank's `tensor` (sources[q] rank q's, this rank's own
  // included), each lying in its rank's published memory, to copy wherever it was set up to;
  // returns once every rank has read. Every rank's tensor must have the same dtype and size.
  using ReadFn = std::function<void(const std::vector<const void*>& sources)>;
  virtual void gather_apply(const torch::Tensor& tensor, const ReadFn& read) = 0;

  // Returns once every rank has called it.
  virtual void barrier() = 0;
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;

  // A zero-filled 1-d CPU tensor of `numel` elements of `dtype` in this rank's published memory,
  // or undefined when there is no room (the caller uses ordinary memory). `kept`: peers view it
  // (peer_view), so it stays until the group is gone rather than turning to zeros under them
  // when this rank lets go first; else it is freed with the tensor.
  virtual torch::Tensor allocate(int64_t numel, c10::ScalarType dtype, bool kept = false) = 0;

  // Where `tensor`'s bytes lie in this rank's published memory (the offset a peer passes to
  // peer_view), or nullopt when they do not lie there (or it is not a CPU tensor).
  virtual std::optional<int64_t> offset_of(const torch::Tensor& tensor) const = 0;

  // `numel` elements of `dtype` at `offset` of rank `rank`'s published memory (allocated there
  // with `kept`): reads and writes go straight to the memory that rank uses.
  virtual torch::Tensor peer_view(int rank, int64_t offset, int64_t numel,
                                  c10::ScalarType dtype) const = 0;

  // Runs `op` with this transport's collective steps on its own thread (see the top).
  virtual c10::intrusive_ptr<c10d::Work> submit(std::function<void(PeerSteps&)> op) = 0;

  // Where the memory is, for a plan's one-line description ("shared memory").
  virtual std::string where() const = 0;
};

// From now on, in every group of this process, `counter(bytes)` when published memory hands a
// tensor out and `counter(-bytes)` when it takes one back (its requested bytes, as an allocator
// counts them): how bench memory counts these tensors with the CPU allocator's (on a GPU they
// would be the allocator's too). Tensors handed out before are not counted either way. Null
// stops counting.
void count_published_with(void (*counter)(int64_t bytes));

}  // namespace ddpx::dist
