// Joining the job for `ddpx train` (see job.h).
#include "train/job.h"

#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"
#include "distributed/context.h"
#include "distributed/device.h"
#include "distributed/threads.h"
#include "optim/amp.h"

namespace ddpx::train {

std::shared_ptr<dist::Context> join_job(const TrainOptions& o) {
  // --deterministic: a kernel may split a reduction by thread count, so the count is fixed (1
  // unless given), and cuBLAS needs a fixed workspace before CUDA starts.
  if (o.deterministic) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  dist::set_threads(o.threads > 0 ? o.threads : o.deterministic ? 1 : dist::default_threads());
  dist::InitOptions init;
  init.device = o.device;
  init.backend = o.backend;
  init.transport = o.transport;
  init.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  auto context = dist::init(init);
  log::set_rank(context->rank());
  optim::check_amp(o.amp, context->device());
  if (context->device().is_cuda())
    at::globalContext().setBenchmarkCuDNN(o.cudnn_benchmark && !o.deterministic);
  if (o.deterministic) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  return context;
}

int64_t per_rank_batch(const TrainOptions& o, int world_size) {
  if (!o.batch_size_scaled) return o.batch_size;
  DDPX_CHECK(o.batch_size % world_size == 0, ErrorKind::kUsage,
             "--batch_size_scaled: --batch_size {} does not divide by the world size {}; pick a "
             "multiple of {}",
             o.batch_size, world_size, world_size);
  return o.batch_size / world_size;
}

std::unique_ptr<LrSchedule> make_schedule(const TrainOptions& o, double learning_rate,
                                          int64_t updates_per_epoch) {
  return std::make_unique<LrSchedule>(
      o.lr_schedule, learning_rate, updates_per_epoch * o.num_epochs,
      o.warmup_steps > 0 ? o.warmup_steps
                         : static_cast<int64_t>(std::llround(o.warmup_epochs * updates_per_epoch)),
      StepDecay{o.lr_step_epochs > 0
                    ? std::max<int64_t>(1, static_cast<int64_t>(
                                               std::llround(o.lr_step_epochs * updates_per_epoch)))
                    : 0,
                o.lr_gamma},
      o.min_lr);
}

void fail_out_of_memory(const TrainOptions& o, int rank, const torch::Device& device,
                        int64_t batch_size) {
  auto memory = dist::device_memory(device);
  fail(ErrorKind::kUsage,
       "rank {}: {} out of memory training --model {} with --batch_size {} per GPU on {} "
       "({:.1f} GiB); try --batch_size {} (or --amp bf16, or --accumulation_steps 2 to keep "
       "the global batch)",
       rank, device.str(), o.model, batch_size, dist::device_name(device),
       memory ? memory->total_bytes / 1073741824.0 : 0.0, std::max<int64_t>(batch_size / 2, 1));
}

}  // namespace ddpx::train
