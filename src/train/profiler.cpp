#include "train/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

}  // namespace

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
  for (const auto& event : result.events()) {
    const std::string name = event.name();
    for (const auto& phase : kPhases) {
      // "ddpx::step" must not swallow other names that start with it; ranges are exact names
      // except the all-reduce prefix.
      bool match =
          phase.prefix == kRangeAllreduce ? starts_with(name, phase.prefix) : name == phase.prefix;
      if (match) ns[phase.name] += static_cast<double>(event.durationNs());
    }
  }
  PhaseTimes times;
  for (const auto& phase : kPhases) {
    times.phases.emplace_back(phase.name);
    times.ms.push_back(ns[phase.name] / 1e6 / static_cast<double>(std::max<int64_t>(steps, 1)));
  }
  return times;
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
  PhaseTimes mine = phase_times(*result, recorded_);

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
