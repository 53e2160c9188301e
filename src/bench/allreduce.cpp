#include "bench/allreduce.h"

#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/shm_backend.h"

namespace ddpx::bench {

int64_t iterations_for(int64_t bytes, int64_t requested) {
  if (requested > 0) return requested;
  return std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(bytes, 1), 5, 200);
}

c10::ScalarType scalar_type(ReduceDtype dtype) {
  switch (dtype) {
    case ReduceDtype::kFloat64:
      return torch::kFloat64;
    case ReduceDtype::kBFloat16:
      return torch::kBFloat16;
    default:
      return torch::kFloat32;
  }
}

const char* type_column(ReduceDtype dtype) {
  switch (dtype) {
    case ReduceDtype::kFloat64:
      return "double";
    case ReduceDtype::kBFloat16:
      return "bfloat16";
    default:
      return "float";
  }
}

double run_allreduce(const AllreduceOptions& o) {
  DDPX_CHECK(o.min_bytes > 0 && o.max_bytes >= o.min_bytes && o.step_factor >= 2, ErrorKind::kUsage,
             "--min_bytes, --max_bytes, --step_factor: need 0 < min <= max "
             "and a factor of at least 2");
  dist::InitOptions init;
  init.device = o.device;
  init.backend = o.backend;
  init.transport = o.transport;
  init.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  auto context = dist::init(init);
  log::set_rank(context->rank());
  DDPX_CHECK(
      context->distributed(), ErrorKind::kUsage,
      "bench allreduce needs at least 2 ranks: run it as `ddpx run 2 -- bench allreduce` (on "
      "one GPU, DDPX_FORCE_GROUP=1 times a group of one)");
  if (o.op != BenchCollective::kAllreduce) return run_scatter_gather(o, *context);
  auto& group = *context->process_group();
  int n = context->world_size();
  const auto dtype = scalar_type(o.dtype);
  const auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const double expected = n * (n + 1) / 2.0;
  const torch::Device device = context->device();
  // A GPU collective returns once queued: time it to completion, as nccl-tests does.
  auto synchronize = [&] {
    if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
  };

  log::out("# ddpx bench allreduce: {} ranks, backend {}, {}, sum, in place, {} buffer on {}", n,
           context->backend(), name(o.dtype), name(o.buffer), device.str());
  log::out("#");
  log::out("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}", "size", "count", "type", "redop",
           "time", "algbw", "busbw", "#wrong");
  log::out("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}", "(B)", "(elements)", "", "",
           "(us)", "(GB/s)", "(GB/s)", "");
  double busbw_sum = 0;
  int sizes = 0;
  int64_t total_wrong = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    int64_t count = std::max<int64_t>(bytes / element, 1);
    torch::Tensor buffer = o.buffer != ReduceBuffer::kShared
                               ? torch::empty({count}, torch::dtype(dtype).device(device))
                           : context->shm() ? context->shm()->allocate_bucket(count, dtype)
                                            : torch::Tensor();
    DDPX_CHECK(buffer.defined(), ErrorKind::kUsage,
               "--buffer shared: backend {} has no shared memory for a {}-byte {} buffer; use "
               "--transport shm on one host (with room in /dev/shm) and --dtype float32 or "
               "float64, or --buffer ordinary",
               context->backend(), count * element, name(o.dtype));
    std::vector<at::Tensor> tensors{buffer};
    for (int64_t i = 0; i < o.warmup; ++i)
      dist::wait_work(group.allreduce(tensors), "bench allreduce warm-up");
    int64_t iterations = iterations_for(bytes, o.iterations);
    synchronize();
    context->barrier();
    Stopwatch watch;
    for (int64_t i = 0; i < iterations; ++i)
      dist::wait_work(group.allreduce(tensors), "bench allreduce");
    synchronize();
    double seconds = watch.seconds() / iterations;
    // Correctness, outside the timed loop: one reduction of known values.
    buffer.fill_(context->rank() + 1);
    dist::wait_work(group.allreduce(tensors), "bench allreduce check");
    int64_t wrong = buffer.ne(expected).sum().item<int64_t>();
    torch::Tensor wrong_total = torch::tensor({static_cast<double>(wrong)}, torch::kFloat64);
    context->all_reduce_sum(wrong_total);
    wrong = static_cast<int64_t>(wrong_total.item<double>());
    total_wrong += wrong;
    double algbw = count * element / seconds / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    busbw_sum += busbw;
    ++sizes;
    log::out("  {:>12} {:>12} {:>8} {:>6} {:>10.1f} {:>8.3f} {:>8.3f} {:>7}", count * element,
             count, type_column(o.dtype), "sum", seconds * 1e6, algbw, busbw, wrong);
  }
  double average = busbw_sum / std::max(sizes, 1);
  log::out("# Out of bounds values : {} {}", total_wrong, total_wrong == 0 ? "OK" : "FAILED");
  log::out("# Avg bus bandwidth    : {:.4f}", average);
  DDPX_CHECK(total_wrong == 0, ErrorKind::kInternal,
             "all-reduce produced {} wrong values; the transport is broken", total_wrong);
  return average;
}

}  // namespace ddpx::bench
