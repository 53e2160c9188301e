// All-gather over shared memory (see shm_allreduce.h): every rank's input lands in part r of
// every rank's output, copied straight from the peers' arenas or, per round, through the slots.
#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "core/error.h"
#include "distributed/shm/shm_allreduce.h"
#include "distributed/shm/shm_control.h"

namespace ddpx::dist {

using shm_layout::kAllgather;
using shm_layout::kBytes;
using shm_layout::kGatherApply;
using shm_layout::signature;
using shm_layout::type_code;

bool ShmAllreduce::takes_all_gather(const torch::Tensor& output, const torch::Tensor& input) const {
  auto plain = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided && t.is_contiguous();
  };
  if (!plain(output) || !plain(input) || output.scalar_type() != input.scalar_type() ||
      output.numel() != input.numel() * world_size_)
    return false;
  if (input.numel() == 0) return true;
  const auto* o = static_cast<const char*>(output.data_ptr());
  const auto* i = static_cast<const char*>(input.data_ptr());
  const int64_t in_bytes = input.numel() * static_cast<int64_t>(input.element_size());
  const bool disjoint = i + in_bytes <= o || o + in_bytes * world_size_ <= i;
  return disjoint || i == o + in_bytes * rank_;
}

void ShmAllreduce::all_gather(torch::Tensor& output, const torch::Tensor& input) {
  DDPX_CHECK(takes_all_gather(output, input), ErrorKind::kInternal,
             "shared-memory all-gather got output {} and input {}; it takes contiguous CPU "
             "tensors of one dtype, the output {} times the input",
             output.toString(), input.toString(), world_size_);
  const int64_t bytes = input.numel() * static_cast<int64_t>(input.element_size());
  const uint64_t type = type_code(input.scalar_type());
  start_call(signature(kAllgather, type, 0, type == kBytes ? bytes : input.numel()),
             input.data_ptr(), bytes);
  if (bytes == 0) return barrier();  // so that no rank writes its next call before all checked
  char* out = static_cast<char*>(output.data_ptr());
  const char* in = static_cast<const char*>(input.data_ptr());
  if (out + rank_ * bytes != in) std::memcpy(out + rank_ * bytes, in, bytes);
  if (all_in_arenas()) {
    ++calls_in_place_;
    for (int q = 0; q < world_size_; ++q)
      if (q != rank_) std::memcpy(out + q * bytes, placed(q), bytes);
    barrier();  // every peer's input stays as it is until every rank has copied it
    return;
  }
  for (int64_t offset = 0; offset < bytes; offset += kChunkBytes) {
    const int64_t n = std::min<int64_t>(kChunkBytes, bytes - offset);
    const int set = static_cast<int>(chunks_done_ & 1);
    std::memcpy(slot(set, rank_), in + offset, n);
    barrier();
    for (int q = 0; q < world_size_; ++q)
      if (q != rank_) std::memcpy(out + q * bytes + offset, slot(set, q), n);
    // A set is refilled two rounds on, after a barrier that every rank reaches only once it
    // has copied this round out.
    ++chunks_done_;
  }
}

void ShmAllreduce::gather_apply(const torch::Tensor& tensor, const ReadFn& read) {
  DDPX_CHECK(tensor.defined() && tensor.device().is_cpu() && tensor.is_contiguous(),
             ErrorKind::kInternal,
             "shared-memory gather-and-apply got {}; it takes a contiguous "
             "CPU tensor",
             tensor.defined() ? tensor.toString() : std::string("nothing"));
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  const uint64_t type = type_code(tensor.scalar_type());
  start_call(signature(kGatherApply, type, 0, type == kBytes ? bytes : tensor.numel()),
             tensor.data_ptr(), bytes);
  if (bytes == 0) return barrier();
  require_in_arenas("a tensor of gather-and-apply", "DDPX_SHM_ARENA=0");
  ++calls_in_place_;
  std::vector<const void*> sources(world_size_);
  for (int q = 0; q < world_size_; ++q) sources[q] = q == rank_ ? tensor.data_ptr() : placed(q);
  std::exception_ptr error;
  try {
    read(sources);
  } catch (...) {
    error = std::current_exception();
  }
  barrier();  // every peer's tensor stays as it is until every rank has read it
  if (error) std::rethrow_exception(error);
}

}  // namespace ddpx::dist
