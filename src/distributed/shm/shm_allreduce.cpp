// The shared-memory collectives (see shm_allreduce.h): all-reduce in the arenas or through the
// chunk slots, reduce-and-apply, broadcast.
#include "distributed/shm/shm_allreduce.h"

#include <cstring>

#include "core/error.h"
#include "distributed/shm/shm_control.h"

namespace ddpx::dist {

using shm_layout::kApply;
using shm_layout::kAverage;
using shm_layout::kBroadcast;
using shm_layout::kBytes;
using shm_layout::kSum;
using shm_layout::signature;
using shm_layout::type_code;

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
  start_call(signature(average ? kAverage : kSum, type_code(tensor.scalar_type()), 0, total),
             tensor.data_ptr(), total * static_cast<int64_t>(tensor.element_size()));
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
  start_call(signature(kApply, type_code(tensor.scalar_type()), 0, total), tensor.data_ptr(),
             total * static_cast<int64_t>(tensor.element_size()));
  if (total == 0) return barrier();
  require_in_arenas("a gradient bucket of reduce-and-apply", "DDPX_SHARDED_STEP=0");
  ++calls_in_place_;
  std::vector<const void*> sources{placed(rank_)};
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) sources.push_back(placed(r));
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
  start_call(signature(kBroadcast, kBytes, root, bytes), nullptr, 0);
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
