// Reduce-scatter over shared memory (see shm_allreduce.h): rank r sums part r of every rank's
// input, read straight from the peers' arenas or, per round, from the slots they publish to.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "distributed/shm/shm_allreduce.h"
#include "distributed/shm/shm_control.h"

namespace ddpx::dist {
namespace {

using shm_layout::kReduceScatterAverage;
using shm_layout::kReduceScatterSum;
using shm_layout::signature;
using shm_layout::type_code;

// Elements summed per block: the block's accumulators stay in L1, and each source is read as
// one stream (the loops vectorise).
constexpr int64_t kBlock = 1024;
// Slot segments start on 64-byte lines.
constexpr int64_t kSegmentAlignBytes = 64;

// out[i] = scale * (((sources[0][i] + sources[1][i]) + sources[2][i]) ...), accumulated in
// Acc. `out` may be one of the sources (the same elements): each block is read before it is
// written.
template <typename T, typename Acc>
void sum_in_rank_order(const std::vector<const T*>& sources, int64_t n, T* out, Acc scale) {
  Acc acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const T* first = sources[0] + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<Acc>(first[i]);
    for (size_t q = 1; q < sources.size(); ++q) {
      const T* src = sources[q] + b;
      for (int64_t i = 0; i < m; ++i) acc[i] += static_cast<Acc>(src[i]);
    }
    T* o = out + b;
    for (int64_t i = 0; i < m; ++i) o[i] = static_cast<T>(acc[i] * scale);
  }
}

// Where part p's segment lies in rank q's slot: q publishes every part but its own, packed.
int64_t segment(int part, int publisher) { return part < publisher ? part : part - 1; }

bool reducible(c10::ScalarType dtype) {
  return dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kBFloat16 ||
         dtype == c10::kHalf;
}

bool plain(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided && t.is_contiguous();
}

}  // namespace

template <typename T, typename Acc>
void ShmAllreduce::reduce_scatter_typed(T* out, const T* in, int64_t part, bool in_arenas,
                                        Acc scale) {
  const int world = world_size_;
  std::vector<const T*> sources(world);
  if (in_arenas) {
    for (int q = 0; q < world; ++q)
      sources[q] = reinterpret_cast<const T*>(placed(q)) + part * rank_;
    sum_in_rank_order<T, Acc>(sources, part, out, scale);
    barrier();  // every peer's input stays as it is until every rank has read its part
    return;
  }
  // Each round, every rank publishes `per_part` elements of each part it does not own.
  constexpr int64_t kAlign = std::max<int64_t>(kSegmentAlignBytes / sizeof(T), 1);
  const int64_t per_part =
      std::max<int64_t>(kChunkBytes / static_cast<int64_t>(sizeof(T)) / (world - 1) / kAlign, 1) *
      kAlign;
  for (int64_t offset = 0; offset < part; offset += per_part) {
    const int64_t n = std::min(per_part, part - offset);
    const int set = static_cast<int>(chunks_done_ & 1);
    T* mine = reinterpret_cast<T*>(slot(set, rank_));
    for (int p = 0; p < world; ++p)
      if (p != rank_)
        std::memcpy(mine + segment(p, rank_) * per_part, in + p * part + offset, n * sizeof(T));
    barrier();
    for (int q = 0; q < world; ++q)
      sources[q] = q == rank_
                       ? in + rank_ * part + offset
                       : reinterpret_cast<const T*>(slot(set, q)) + segment(rank_, q) * per_part;
    sum_in_rank_order<T, Acc>(sources, n, out + offset, scale);
    // A set is refilled two rounds on, after a barrier that every rank reaches only once it
    // has read this round.
    ++chunks_done_;
  }
}

bool ShmAllreduce::takes_reduce_scatter(const torch::Tensor& output,
                                        const torch::Tensor& input) const {
  if (!plain(output) || !plain(input) || output.scalar_type() != input.scalar_type() ||
      !reducible(input.scalar_type()) || input.numel() != output.numel() * world_size_)
    return false;
  if (output.numel() == 0) return true;
  const auto* o = static_cast<const char*>(output.data_ptr());
  const auto* i = static_cast<const char*>(input.data_ptr());
  const int64_t out_bytes = output.numel() * static_cast<int64_t>(output.element_size());
  const bool disjoint = o + out_bytes <= i || i + out_bytes * world_size_ <= o;
  return disjoint || o == i + out_bytes * rank_;
}

void ShmAllreduce::reduce_scatter(torch::Tensor& output, const torch::Tensor& input, bool average) {
  DDPX_CHECK(takes_reduce_scatter(output, input), ErrorKind::kInternal,
             "shared-memory reduce-scatter got output {} and input {}; it takes contiguous CPU "
             "float32/float64/bfloat16/float16 tensors, input {} times the output",
             output.toString(), input.toString(), world_size_);
  const int64_t part = output.numel();
  start_call(signature(average ? kReduceScatterAverage : kReduceScatterSum,
                       type_code(input.scalar_type()), 0, input.numel()),
             input.data_ptr(), input.numel() * static_cast<int64_t>(input.element_size()));
  if (part == 0) return barrier();  // so that no rank writes its next call before all checked
  const bool in_arenas = all_in_arenas();
  calls_in_place_ += in_arenas;
  auto run = [&](auto* out, auto unit) {
    using T = std::remove_pointer_t<decltype(out)>;
    using Acc = decltype(unit);
    const Acc scale = average ? Acc(1) / static_cast<Acc>(world_size_) : Acc(1);
    reduce_scatter_typed<T, Acc>(out, static_cast<const T*>(input.data_ptr()), part, in_arenas,
                                 scale);
  };
  switch (input.scalar_type()) {
    case c10::kFloat:
      return run(output.data_ptr<float>(), 1.0f);
    case c10::kDouble:
      return run(output.data_ptr<double>(), 1.0);
    case c10::kBFloat16:
      return run(output.data_ptr<c10::BFloat16>(), 1.0f);
    default:
      return run(output.data_ptr<c10::Half>(), 1.0f);
  }
}

}  // namespace ddpx::dist
