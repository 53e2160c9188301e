#include "train/profiler.h"

#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/log.h"

namespace ddpx::train {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

// The table's phases and the ranges they sum (by name prefix).
struct Phase {
  const char* name;
  const char* prefix;
};
constexpr Phase kPhases[] = {{"step", kRangeStep},           {"data_wait", kRangeDataWait},
                             {"forward", kRangeForward},     {"backward", kRangeBackward},
                             {"allreduce", kRangeAllreduce}, {"optimizer", kRangeOptimizer}};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Adds one range of `name` to the phase it belongs to. "ddpx::step" must not swallow other names
// that start with it; ranges are exact names except the all-reduce prefix.
void add_range(std::map<std::string, double>& ns, const std::string& name, double range_ns) {
  for (const auto& phase : kPhases) {
    bool match =
        phase.prefix == kRangeAllreduce ? starts_with(name, phase.prefix) : name == phase.prefix;
    if (match) ns[phase.name] += range_ns;
  }
}

PhaseTimes per_step(std::map<std::string, double>& ns, int64_t steps) {
  PhaseTimes times;
  for (const auto& phase : kPhases) {
    times.phases.emplace_back(phase.name);
    times.ms.push_back(ns[phase.name] / 1e6 / static_cast<double>(std::max<int64_t>(steps, 1)));
  }
  return times;
}

}  // namespace

// On a GPU the host only queues work: a range's host time is how long queueing took, not how
// long the GPU ran. So each ddpx range also gets a CUDA event where it opens and one where it
// closes, on the current stream of the thread that opens it (RecordFunction callbacks, which see
// the ranges of the autograd threads too); the time between them is the phase's GPU time.
class DeviceRangeTimer {
 public:
  explicit DeviceRangeTimer(const torch::Device& device) : device_(device) {
    active_ = this;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&DeviceRangeTimer::enter, &DeviceRangeTimer::exit)
            .scopes({at::RecordScope::USER_SCOPE}));
  }
  ~DeviceRangeTimer() {
    if (handle_ != 0) at::removeCallback(handle_);
    active_ = nullptr;
  }
  DeviceRangeTimer(const DeviceRangeTimer&) = delete;
  DeviceRangeTimer& operator=(const DeviceRangeTimer&) = delete;

  // Milliseconds per step of each phase on the GPU; waits for the device.
  PhaseTimes phase_times(int64_t steps) {
    at::removeCallback(handle_);
    handle_ = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::string, double> ns;
    for (auto& range : ranges_) {
      range.end.synchronize();
      add_range(ns, range.name, range.start.elapsedTime(range.end) * 1e6);
    }
    return per_step(ns, steps);
  }

 private:
  struct Opened : at::ObserverContext {
    std::string name;
    c10::Event start{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  };
  struct Range {
    std::string name;
    c10::Event start, end;
  };

  c10::Stream current_stream() const {
    return c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
  }

  static std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
    DeviceRangeTimer* self = active_;
    if (self == nullptr || !starts_with(fn.name(), "ddpx::")) return nullptr;
    auto opened = std::make_unique<Opened>();
    opened->name = fn.name();
    opened->start.record(self->current_stream());
    return opened;
  }

  static void exit(const at::RecordFunction& /*fn*/, at::ObserverContext* context) {
    DeviceRangeTimer* self = active_;
    if (self == nullptr || context == nullptr) return;
    auto* opened = static_cast<Opened*>(context);
    c10::Event end(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    end.record(self->current_stream());
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->ranges_.push_back(Range{opened->name, std::move(opened->start), std::move(end)});
  }

  static inline std::atomic<DeviceRangeTimer*> active_{nullptr};
  torch::Device device_;
  at::CallbackHandle handle_ = 0;
  std::mutex mutex_;
  std::vector<Range> ranges_;
};

void check_profile_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::string probe = dir + "/.ddpx_write_test";
  bool writable = !error && std::ofstream(probe).good();
  std::filesystem::remove(probe, error);
  DDPX_CHECK(writable, ErrorKind::kUsage,
             "--profile {}: cannot create or write this directory; give a writable directory", dir);
}

PhaseTimes phase_times(const prof::ProfilerResult& result, int64_t steps) {
  std::map<std::string, double> ns;
  for (const auto& event : result.events())
    add_range(ns, event.name(), static_cast<double>(event.durationNs()));
  return per_step(ns, steps);
}

StepProfiler::StepProfiler(std::string dir, int64_t skip, int64_t steps,
                           const torch::Device& device, dist::Context& context)
    : dir_(std::move(dir)), skip_(skip), steps_(steps), device_(device), context_(context) {}

StepProfiler::~StepProfiler() {
  if (recording_) prof::disableProfiler();  // an exception unwound training: record nothing
}

void StepProfiler::before_step() {
  if (done_ || recording_ || seen_++ < skip_) return;
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (device_.is_cuda()) {
    activities.insert(impl::ActivityType::CUDA);
  } else {
    // Kineto asks CUDA for its devices even for a CPU trace and logs an ERROR line when there
    // are none; only its own errors from then on are silenced (a user's setting is kept).
    setenv("KINETO_LOG_LEVEL", "4", /*overwrite=*/0);
  }
  prof::prepareProfiler(impl::ProfilerConfig(impl::ProfilerState::KINETO), activities);
  prof::enableProfiler(impl::ProfilerConfig(impl::ProfilerState::KINETO), activities);
  if (device_.is_cuda()) device_timer_ = std::make_unique<DeviceRangeTimer>(device_);
  recording_ = true;
}

void StepProfiler::after_step() {
  if (!recording_) return;
  if (++recorded_ >= steps_) stop();
}

void StepProfiler::finish() {
  if (recording_) {
    stop();
  } else if (!done_ && context_.rank() == 0) {
    log::warn(
        "--profile: training ended before --profile_skip {} steps had passed; nothing was "
        "recorded (lower --profile_skip)",
        skip_);
  }
}

void StepProfiler::stop() {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  recording_ = false;
  done_ = true;
  const std::string path = fmt::format("{}/rank{}.trace.json", dir_, context_.rank());
  result->save(path);
  // A GPU's phases in GPU time (DeviceRangeTimer); a CPU's are the host ranges themselves.
  PhaseTimes mine =
      device_timer_ ? device_timer_->phase_times(recorded_) : phase_times(*result, recorded_);
  const bool gpu_time = device_timer_ != nullptr;
  device_timer_.reset();

  // (world, phases) milliseconds, each rank filling its row, summed: every rank's figures.
  const auto world = context_.world_size();
  const auto count = static_cast<int64_t>(mine.ms.size());
  torch::Tensor table = torch::zeros({world, count}, torch::kFloat64);
  for (int64_t p = 0; p < count; ++p) table[context_.rank()][p] = mine.ms[p];
  context_.all_reduce_sum(table);
  if (context_.rank() != 0) return;

  auto ms = table.accessor<double, 2>();
  log::out(
      "profile: {} steps per rank recorded after {} warm-up steps; traces in "
      "{}/rank<R>.trace.json (open them in https://ui.perfetto.dev or chrome://tracing)",
      recorded_, skip_, dir_);
  log::out("# {}", gpu_time
                       ? "GPU time: CUDA events where each phase opens and closes, on its stream"
                       : "host time of each phase");
  std::string header = fmt::format("# {:<10}", "phase");
  for (int r = 0; r < world; ++r) header += fmt::format(" {:>11}", fmt::format("rank {} ms", r));
  log::out("{}  {:>6}  {}", header, "share", "slowest");
  for (int64_t p = 0; p < count; ++p) {
    std::string row = fmt::format("  {:<10}", mine.phases[p]);
    double share = 0;
    int slowest = 0;
    for (int r = 0; r < world; ++r) {
      row += fmt::format(" {:>11.2f}", ms[r][p]);
      share += ms[r][0] > 0 ? ms[r][p] / ms[r][0] : 0;
      if (ms[r][p] > ms[slowest][p]) slowest = r;
    }
    log::out("{}  {:>5.1f}%  rank {}", row, 100.0 * share / world, slowest);
  }
  log::out(
      "  (allreduce is each bucket's launch and the wait for them; both run inside "
      "backward, as does the step when it is taken bucket by bucket)");
}

}  // namespace ddpx::train
