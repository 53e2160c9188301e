#include "bench/batch_finder.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "core/proc_memory.h"
#include "core/timer.h"
#include "distributed/device.h"
#include "distributed/threads.h"
#include "distributed/world.h"
#include "models/zoo/registry.h"
#include "parallel/placement.h"

namespace ddpx::bench {
namespace {

constexpr double kGiB = 1073741824.0;
constexpr double kKneeShare = 0.9;     // CPU: the knee is within 10% of the best images/s
constexpr int64_t kBisectGranule = 8;  // GPU: stop bisecting when the gap is this small
constexpr double kMinSeconds = 1.0;    // timed per size, at least

// A language model's window (0 for an image model) and vocabulary.
int64_t window(const BatchFinderOptions& o) {
  const models::ModelInfo& info = models::find_model(o.model);
  if (!models::is_language_model(info)) return 0;
  return o.seq_len > 0 ? o.seq_len : info.default_image_size;
}
int64_t vocabulary(const BatchFinderOptions& o) {
  return o.vocab_size > 0 ? o.vocab_size : models::find_model(o.model).vocab_size;
}
const char* unit(const BatchFinderOptions& o) { return window(o) > 0 ? "tokens/s" : "images/s"; }

class Trainer {
 public:
  Trainer(const BatchFinderOptions& o, const torch::Device& device) : o_(o), device_(device) {
    models::ModelConfig config;
    config.num_classes = o.num_classes;
    config.image_size = o.image_size;
    config.stem = o.stem;
    config.bias = o.bias;
    tokens_ = window(o);
    if (tokens_ > 0) config.num_classes = vocabulary(o);
    classes_ = config.num_classes;
    model_ = models::create_model(o.model, config);
    parallel::place_model(*model_.ptr(), device, o.channels_last);
    model_.ptr()->train();
    if (tokens_ > 0) {
      optimizer_ = std::make_unique<torch::optim::AdamW>(model_.ptr()->parameters(),
                                                         torch::optim::AdamWOptions(1e-3));
    } else {
      optimizer_ = std::make_unique<torch::optim::SGD>(
          model_.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    }
  }

  // What one sample of a batch counts: an image, or a window's tokens.
  int64_t per_sample() const { return tokens_ > 0 ? tokens_ : 1; }

  BatchTrial trial(int64_t batch) {
    BatchTrial t;
    t.batch = batch;
    // The previous trial's blocks stay cached (reserved) after its tensors are freed; the peak
    // of this one must count only what this batch needs.
    if (device_.is_cuda()) {
      synchronize();
      at::accelerator::emptyCache();
    }
    reset_peak();
    try {
      // x: (B, 3, S, S) random images, labels: (B); a language model's x and labels: (B, T)
      // random token ids.
      const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device_);
      torch::Tensor x, labels;
      if (tokens_ > 0) {
        x = torch::randint(classes_, {batch, tokens_}, ids);
        labels = torch::randint(classes_, {batch, tokens_}, ids);
      } else {
        x = torch::randn({batch, 3, o_.image_size, o_.image_size},
                         torch::TensorOptions().device(device_));
        if (o_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
        labels = torch::randint(classes_, {batch}, ids);
      }
      step(x, labels);  // warm-up: allocator, cuDNN algorithm choice
      synchronize();
      // At least `steps` steps and kMinSeconds: small batches take milliseconds a step.
      Stopwatch watch;
      int64_t steps = 0;
      while (steps < o_.steps || watch.seconds() < kMinSeconds) {
        step(x, labels);
        ++steps;
        if (steps % o_.steps == 0) synchronize();
      }
      synchronize();
      t.per_sec =
          static_cast<double>(batch * steps * per_sample()) / std::max(watch.seconds(), 1e-9);
      t.fits = true;
    } catch (const std::exception& e) {
      if (!dist::is_out_of_memory(e)) throw;
      optimizer_->zero_grad();
      if (device_.is_cuda()) at::accelerator::emptyCache();
    }
    t.peak_gib = peak_gib();
    return t;
  }

 private:
  void step(const torch::Tensor& x, const torch::Tensor& labels) {
    optimizer_->zero_grad();
    torch::Tensor loss;
    {
      optim::AutocastGuard autocast(o_.amp, device_);
      // The class dimension last: (B, K) against (B), or a language model's (B, T, V) against
      // (B, T).
      loss =
          torch::nn::functional::cross_entropy(model_.forward(x).flatten(0, -2), labels.flatten());
    }
    loss.backward();
    optimizer_->step();
  }
  void synchronize() {
    if (device_.is_cuda()) at::accelerator::synchronizeDevice(device_.index());
  }
  void reset_peak() {
    if (device_.is_cuda()) {
      at::accelerator::resetPeakStats(device_.index());
    } else {
      reset_peak_rss();
    }
  }
  double peak_gib() const {
    if (!device_.is_cuda()) return proc_status_mib("VmHWM") / 1024.0;
    const auto stats = at::accelerator::getDeviceStats(device_.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
               .peak /
           kGiB;
  }

  const BatchFinderOptions& o_;
  torch::Device device_;
  int64_t tokens_ = 0;   // a language model's window; 0 for an image model
  int64_t classes_ = 0;  // classifier outputs, or a language model's vocabulary
  torch::nn::AnyModule model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

BatchFinderResult find_batch_size(const BatchFinderOptions& o) {
  DDPX_CHECK(o.start_batch > 0 && o.max_batch >= o.start_batch, ErrorKind::kUsage,
             "--start_batch must be positive and --max_batch at least --start_batch (got {} "
             "and {})",
             o.start_batch, o.max_batch);
  DDPX_CHECK(o.steps > 0 && o.image_size > 0, ErrorKind::kUsage,
             "--steps and --image_size must be positive");
  DDPX_CHECK(o.margin >= 0 && o.margin < 1, ErrorKind::kUsage,
             "--margin is the share of GPU memory kept free: in [0, 1), got {}", o.margin);
  dist::set_threads(o.threads > 0 ? o.threads : dist::default_threads());
  const torch::Device device = dist::select_device(o.device, dist::detect_world());
  // --amp auto: bf16 where this device computes it natively, as `ddpx train` decides.
  const optim::AmpChoice amp = optim::resolve_amp(o.amp, dist::bf16_support(device));
  optim::check_amp(amp.amp, device);
  BatchFinderOptions resolved = o;
  resolved.amp = amp.amp;

  BatchFinderResult r;
  r.amp = amp.reason.empty() ? optim::name(amp.amp)
                             : fmt::format("{} ({})", optim::name(amp.amp), amp.reason);
  r.device =
      device.is_cuda() ? fmt::format("{} ({})", device.str(), dist::device_name(device)) : "cpu";
  if (device.is_cuda()) {
    auto memory = dist::device_memory(device);
    r.memory_limit_gib = memory ? memory->total_bytes / kGiB : 0;
  } else {
    r.memory_limit_gib =
        o.memory_budget_gib > 0 ? o.memory_budget_gib : available_memory_mib() / 2 / 1024.0;
  }
  Trainer trainer(resolved, device);
  // A size fits when it ran and its peak stays under the limit (less the margin on a GPU).
  auto fits = [&](BatchTrial& t) {
    t.fits = t.fits && (device.is_cuda() ? t.peak_gib <= (1 - o.margin) * r.memory_limit_gib
                                         : t.peak_gib <= r.memory_limit_gib);
    return t.fits;
  };

  // Doubling.
  int64_t good = 0, bad = 0;
  for (int64_t b = o.start_batch; b <= o.max_batch; b *= 2) {
    r.trials.push_back(trainer.trial(b));
    if (!fits(r.trials.back())) {
      bad = b;
      break;
    }
    good = b;
  }
  // GPU: bisect between the last fit and the first miss.
  if (device.is_cuda() && good > 0 && bad > 0) {
    while (bad - good > kBisectGranule) {
      int64_t mid = (good + bad) / 2 / kBisectGranule * kBisectGranule;
      if (mid <= good) break;
      r.trials.push_back(trainer.trial(mid));
      (fits(r.trials.back()) ? good : bad) = mid;
    }
  }
  if (good == 0) {
    r.reason =
        fmt::format("not even --start_batch {} fits; lower it, or try --amp bf16", o.start_batch);
    return r;
  }
  if (device.is_cuda()) {
    r.recommended = good;
    r.reason = fmt::format("the largest batch whose peak stays under {:.0f}% of the GPU's memory",
                           100 * (1 - o.margin));
    return r;
  }
  double best = 0;
  for (const auto& t : r.trials)
    if (t.fits) best = std::max(best, t.per_sec);
  for (const auto& t : r.trials) {
    if (t.fits && t.per_sec >= kKneeShare * best) {
      r.recommended = t.batch;
      break;
    }
  }
  r.reason = fmt::format(
      "the knee: the smallest batch within {:.0f}% of the best {} ({:.1f}); larger ones "
      "cost memory and updates per epoch, not speed",
      100 * (1 - kKneeShare), unit(o), best);
  return r;
}

void print_batch_finder(const BatchFinderOptions& o, const BatchFinderResult& r) {
  const int64_t tokens = window(o);
  const std::string input = tokens > 0 ? fmt::format("tokens {} vocabulary {} (AdamW{})", tokens,
                                                     vocabulary(o), o.bias ? "" : ", no biases")
                                       : fmt::format("image {}x{}", o.image_size, o.image_size);
  log::out(
      "# tune batch_size: model {}{} {} amp {} on {}, at least {} timed steps and 1 s per size",
      o.model,
      models::find_model(o.model).has_cifar_stem ? std::string(" stem ") + models::name(o.stem)
                                                 : std::string(),
      input, r.amp, r.device, o.steps);
  log::out("# memory limit {:.1f} GiB ({})", r.memory_limit_gib,
           r.device == "cpu" ? "CPU budget: --memory_budget_gib, default half of MemAvailable"
                             : fmt::format("GPU memory, {:.0f}% kept free", 100 * o.margin));
  log::out("# {:>8} {:>12} {:>10}  {}", "batch", unit(o), "peak GiB", "status");
  for (const auto& t : r.trials) {
    const char* status = !t.fits ? (r.device == "cpu" ? "over the budget" : "out of memory")
                         : t.batch == r.recommended ? "recommended"
                                                    : "ok";
    log::out("  {:>8} {:>12.1f} {:>10.2f}  {}", t.batch, t.per_sec, t.peak_gib, status);
  }
  if (r.recommended == 0) {
    log::out("no recommendation: {}", r.reason);
    return;
  }
  log::out("recommendation: --batch_size {}   ({})", r.recommended, r.reason);
}

}  // namespace ddpx::bench
