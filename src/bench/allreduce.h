// An nccl-tests style all-reduce benchmark, run under `ddpx run N -- bench allreduce`.
// Every rank fills its buffer with rank + 1 so the result is known (n(n+1)/2) and #wrong
// counts elements that differ. busbw = algbw * 2(n-1)/n, as nccl-tests defines it.
//
// `--op reduce_scatter|all_gather` times the group's reduce-scatter or all-gather into a tensor
// instead (scatter_gather.cpp), and, when the group has shared memory, Gloo's own beside it in
// the same run. The size is the whole tensor (the reduce-scatter's input, the all-gather's
// output) and busbw = algbw * (n-1)/n, as nccl-tests defines them.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "core/names.h"
#include "distributed/choices.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::bench {

enum class ReduceDtype { kFloat32, kFloat64, kBFloat16 };
inline constexpr NameTable<ReduceDtype, 3> kReduceDtypeNames{
    {{ReduceDtype::kFloat32, "float32"},
     {ReduceDtype::kFloat64, "float64"},
     {ReduceDtype::kBFloat16, "bfloat16"}}};
inline const char* name(ReduceDtype dtype) { return name_of(kReduceDtypeNames, dtype); }
c10::ScalarType scalar_type(ReduceDtype dtype);
// Timed iterations for one message size: `requested` where positive, else about 64 MiB moved
// (between 5 and 200).
int64_t iterations_for(int64_t bytes, int64_t requested);
const char* type_column(ReduceDtype dtype);  // the table's type column: float, double, bfloat16

// ordinary: a plain tensor (what a user's all-reduce passes). shared: allocated where DDP puts
// its gradient buckets (the group's shared memory with --transport shm), reduced in place
// without copies.
enum class ReduceBuffer { kOrdinary, kShared };
inline constexpr NameTable<ReduceBuffer, 2> kReduceBufferNames{
    {{ReduceBuffer::kOrdinary, "ordinary"}, {ReduceBuffer::kShared, "shared"}}};
inline const char* name(ReduceBuffer buffer) { return name_of(kReduceBufferNames, buffer); }

enum class BenchCollective { kAllreduce, kReduceScatter, kAllGather };
inline constexpr NameTable<BenchCollective, 3> kBenchCollectiveNames{
    {{BenchCollective::kAllreduce, "allreduce"},
     {BenchCollective::kReduceScatter, "reduce_scatter"},
     {BenchCollective::kAllGather, "all_gather"}}};
inline const char* name(BenchCollective op) { return name_of(kBenchCollectiveNames, op); }

struct AllreduceOptions {
  BenchCollective op = BenchCollective::kAllreduce;
  int64_t min_bytes = int64_t{1} << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t step_factor = 2;
  int64_t iterations = 0;  // 0: chosen per size (more for small sizes)
  int64_t warmup = 2;
  ReduceDtype dtype = ReduceDtype::kFloat32;
  dist::BackendChoice backend = dist::BackendChoice::kAuto;
  dist::Transport transport = dist::Transport::kAuto;
  ReduceBuffer buffer = ReduceBuffer::kOrdinary;
  double timeout_s = 300;
  // Where the buffers live: auto is the GPU when one is visible (then NCCL, as nccl-tests).
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;
};

// Prints the table on rank 0; returns the average bus bandwidth in GB/s (on every rank).
double run_allreduce(const AllreduceOptions& options);
// The --op reduce_scatter|all_gather table on a joined job; the same return value (the
// group's own transport's figure).
double run_scatter_gather(const AllreduceOptions& options, dist::Context& context);

}  // namespace ddpx::bench
