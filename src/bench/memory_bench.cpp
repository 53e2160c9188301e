#include "bench/memory_bench.h"

#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <string>

#include "core/error.h"
#include "core/proc_memory.h"
#include "core/timer.h"
#include "distributed/threads.h"
#include "models/zoo/registry.h"

namespace ddpx::bench {
namespace {

constexpr double kMomentum = 0.9;
constexpr double kLearningRate = 0.01;

}  // namespace

MemoryBenchResult run_memory_bench(const MemoryBenchOptions& o) {
  DDPX_CHECK(o.batch_size > 0, ErrorKind::kUsage, "--batch_size must be positive, got {}",
             o.batch_size);
  DDPX_CHECK(o.image_size >= 0, ErrorKind::kUsage,
             "--image_size must be >= 0 (0: the model's default), got {}", o.image_size);
  dist::set_threads(o.threads > 0 ? o.threads : dist::default_threads());
  const models::ModelInfo& info = models::find_model(o.model);

  MemoryBenchResult r;
  r.image_size = o.image_size > 0 ? o.image_size : info.default_image_size;
  models::ModelConfig config;
  config.num_classes = o.num_classes;
  config.image_size = r.image_size;
  config.bias = o.bias;
  r.baseline_mib = proc_status_mib("VmRSS");

  Stopwatch build;
  torch::nn::AnyModule model = models::create_model(o.model, config);
  r.build_s = build.seconds();
  r.built_mib = proc_status_mib("VmRSS");

  model.ptr()->train();
  torch::optim::SGD optimizer(model.ptr()->parameters(),
                              torch::optim::SGDOptions(kLearningRate).momentum(kMomentum));
  // x: (B, 3, S, S), labels: (B,)
  const torch::Tensor x = torch::randn({o.batch_size, 3, r.image_size, r.image_size});
  const torch::Tensor labels = torch::randint(o.num_classes, {o.batch_size}, torch::kLong);
  Stopwatch step;
  optimizer.zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(model.forward(x), labels);
  loss.backward();
  optimizer.step();
  r.loss = loss.item<double>();
  r.step_s = step.seconds();
  r.peak_mib = proc_status_mib("VmHWM");
  return r;
}

void print_memory_bench(const MemoryBenchOptions& o, const MemoryBenchResult& r) {
  fmt::print("# ddpx bench memory: {}, {}x{} input, batch {}, {} classes, one SGD-momentum step\n",
             o.model, r.image_size, r.image_size, o.batch_size, o.num_classes);
  fmt::print(
      "# resident MiB: {:.1f} before the build, {:.1f} after, peak {:.1f} "
      "(+{:.1f} over the baseline); build {:.2f} s, step {:.2f} s, loss {:.4f}\n",
      r.baseline_mib, r.built_mib, r.peak_mib, r.peak_mib - r.baseline_mib, r.build_s, r.step_s,
      r.loss);
  fmt::print(
      "memory model={} size={} batch={} baseline_mib={:.1f} built_mib={:.1f} "
      "peak_mib={:.1f} build_s={:.3f} step_s={:.3f}\n",
      o.model, r.image_size, o.batch_size, r.baseline_mib, r.built_mib, r.peak_mib, r.build_s,
      r.step_s);
}

}  // namespace ddpx::bench
