// The bytes CPU tensors hold, counted at the allocator: while a CpuTensorBytes is alive, every CPU
// tensor's storage is allocated through a counting wrapper around libtorch's CPU allocator, which
// keeps the bytes now allocated and their peak since the last reset_peak(). This is the CPU's
// torch.cuda.memory_allocated() / max_memory_allocated(): what tensors hold, without the
// allocator's slack, oneDNN's scratch buffers or the rest of the process (RSS counts those).
// Storages allocated inside the scope are counted when they are freed, even after it ends.
// One at a time per process. Allocations can also be counted by the thread that made them
// (tag_thread()).
#pragma once

#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace ddpx::parallel {

class CpuTensorBytes {
 public:
  CpuTensorBytes();   // installs the counting allocator
  ~CpuTensorBytes();  // puts the previous one back
  CpuTensorBytes(const CpuTensorBytes&) = delete;
  CpuTensorBytes& operator=(const CpuTensorBytes&) = delete;

  int64_t current() const;  // bytes of counted storages alive now
  int64_t peak() const;     // the most alive at once since construction or reset_peak()
  void reset_peak();        // peak = current, for every tag too

  // Tags: what a thread allocates after tag_thread(k) also counts for tag k, wherever it is
  // freed: a rank's own bytes when ranks are threads of one process (thread_ranks.h). -1: none.
  static void tag_thread(int tag);

  // Bytes of tensors that are not the CPU allocator's (the memory a group's ranks publish to
  // each other, dist::count_published_with): added to the count now, negative when they are
  // given back, as if they had been allocated here (no tag).
  static void count_outside(int64_t bytes);
  int64_t tag_current(int tag) const;
  int64_t tag_peak(int tag) const;

 private:
  c10::Allocator* previous_ = nullptr;
};

}  // namespace ddpx::parallel
