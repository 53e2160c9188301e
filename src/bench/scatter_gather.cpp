// `ddpx bench allreduce --op reduce_scatter|all_gather` (see allreduce.h): the group's
// reduce-scatter or all-gather into a tensor, the collectives of a sharded plan, timed as
// nccl-tests does; and, where the group has shared memory, the same call on its Gloo backend in
// the same run, so the two transports are compared on one machine at one moment.
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>

#include <functional>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "bench/allreduce.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/shm_backend.h"

namespace ddpx::bench {
namespace {

using Call = std::function<c10::intrusive_ptr<c10d::Work>()>;

}  // namespace

double run_scatter_gather(const AllreduceOptions& o, dist::Context& context) {
  DDPX_CHECK(o.buffer == ReduceBuffer::kOrdinary, ErrorKind::kUsage,
             "--buffer shared goes with --op allreduce (DDP's gradient buckets); drop it for "
             "--op {}",
             name(o.op));
  const bool scatter = o.op == BenchCollective::kReduceScatter;
  auto& group = *context.process_group();
  // Gloo itself, beside the group's transport, when that is shared memory.
  c10d::Backend* gloo = context.shm() ? &context.shm()->inner() : nullptr;
  const int n = context.world_size();
  const auto dtype = scalar_type(o.dtype);
  const auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const torch::Device device = context.device();
  auto synchronize = [&] {
    if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
  };
  c10d::ReduceScatterOptions sum;
  sum.reduceOp = c10d::ReduceOp::SUM;

  log::out("# ddpx bench allreduce --op {}: {} ranks, backend {}, {}, {}, on {}{}", name(o.op), n,
           context.backend(), name(o.dtype), scatter ? "sum" : "no reduction", device.str(),
           gloo ? "; gloo: the same call on the group's Gloo backend" : "");
  log::out("#");
  std::string head = fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8}", "size", "count",
                                 "type", "redop", "time", "algbw", "busbw");
  std::string units = fmt::format("# {:>12} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8}", "(B)",
                                  "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)");
  if (gloo) {
    head += fmt::format(" {:>10} {:>8}", "gloo time", "busbw");
    units += fmt::format(" {:>10} {:>8}", "(us)", "(GB/s)");
  }
  log::out("{} {:>7}", head, "#wrong");
  log::out("{} {:>7}", units, "");

  double busbw_sum = 0;
  int sizes = 0;
  int64_t total_wrong = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    // The whole tensor: n equal parts of at least one element.
    const int64_t part = std::max<int64_t>(bytes / element / n, 1), count = part * n;
    auto options = torch::dtype(dtype).device(device);
    torch::Tensor whole = torch::empty({count}, options), mine = torch::empty({part}, options);
    auto call_on = [&](c10d::Backend* backend) -> Call {
      if (scatter)
        return backend
                   ? Call([&, backend] { return backend->_reduce_scatter_base(mine, whole, sum); })
                   : Call([&] { return group._reduce_scatter_base(mine, whole, sum); });
      return backend ? Call([&, backend] { return backend->_allgather_base(whole, mine, {}); })
                     : Call([&] { return group._allgather_base(whole, mine); });
    };
    const int64_t iterations = iterations_for(count * element, o.iterations);
    auto time = [&](const Call& call) {
      for (int64_t i = 0; i < o.warmup; ++i) dist::wait_work(call(), "bench warm-up");
      synchronize();
      context.barrier();
      Stopwatch watch;
      for (int64_t i = 0; i < iterations; ++i) dist::wait_work(call(), "bench");
      synchronize();
      return watch.seconds() / iterations;
    };
    // Correctness, outside the timed loops: every rank holds rank + 1, so a reduce-scatter
    // gives n(n+1)/2 everywhere and an all-gather part r holds r + 1.
    auto wrong_of = [&](const Call& call) {
      (scatter ? whole : mine).fill_(context.rank() + 1);
      (scatter ? mine : whole).zero_();
      dist::wait_work(call(), "bench check");
      torch::Tensor expected = scatter ? torch::full({part}, n * (n + 1) / 2.0, options)
                                       : torch::arange(1, n + 1, options).repeat_interleave(part);
      return (scatter ? mine : whole).ne(expected).sum().item<int64_t>();
    };
    const double seconds = time(call_on(nullptr));
    int64_t wrong = wrong_of(call_on(nullptr));
    double gloo_seconds = 0;
    if (gloo) {
      gloo_seconds = time(call_on(gloo));
      wrong += wrong_of(call_on(gloo));
    }
    torch::Tensor wrong_total = torch::tensor({static_cast<double>(wrong)}, torch::kFloat64);
    context.all_reduce_sum(wrong_total);
    wrong = static_cast<int64_t>(wrong_total.item<double>());
    total_wrong += wrong;
    const double factor = (n - 1.0) / n;
    const double algbw = count * element / seconds / 1e9, busbw = algbw * factor;
    busbw_sum += busbw;
    ++sizes;
    std::string row = fmt::format("  {:>12} {:>12} {:>8} {:>6} {:>10.1f} {:>8.3f} {:>8.3f}",
                                  count * element, count, type_column(o.dtype),
                                  scatter ? "sum" : "none", seconds * 1e6, algbw, busbw);
    if (gloo)
      row += fmt::format(" {:>10.1f} {:>8.3f}", gloo_seconds * 1e6,
                         count * element / gloo_seconds / 1e9 * factor);
    log::out("{} {:>7}", row, wrong);
  }
  const double average = busbw_sum / std::max(sizes, 1);
  log::out("# Out of bounds values : {} {}", total_wrong, total_wrong == 0 ? "OK" : "FAILED");
  log::out("# Avg bus bandwidth    : {:.4f}", average);
  DDPX_CHECK(total_wrong == 0, ErrorKind::kInternal,
             "{} produced {} wrong values; the transport is broken", name(o.op), total_wrong);
  return average;
}

}  // namespace ddpx::bench
