#include "train/curves.h"

#include <ATen/DeviceAccelerator.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensorboard.h"

namespace ddpx::train {

Curves::Curves(const std::string& metrics_json, const std::string& tensorboard_dir, int rank,
               int world_size)
    : metrics_json_(metrics_json), world_size_(world_size), writer_(rank == 0) {
  if (!writer_) return;
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (!metrics_json_.empty()) {
    DDPX_CHECK(std::ofstream(metrics_json_, std::ios::app).good(), ErrorKind::kUsage,
               "--metrics_json {}: cannot open for appending; give a writable path", metrics_json_);
  }
}

Curves::~Curves() = default;

void Curves::step(const StepPoint& p) {
  if (!tensorboard_) return;
  tensorboard_->add_scalar("train/loss", p.loss, p.step);
  tensorboard_->add_scalar("train/accuracy", p.accuracy, p.step);
  tensorboard_->add_scalar("train/learning_rate", p.learning_rate, p.step);
  tensorboard_->add_scalar("speed/images_per_sec", p.images_per_sec, p.step);
  tensorboard_->add_scalar("speed/step_time_s", p.step_time_s, p.step);
  if (p.gpu_memory_gib) tensorboard_->add_scalar("gpu/memory_gib", *p.gpu_memory_gib, p.step);
  tensorboard_->flush();
}

void Curves::epoch(const EpochResult& r, int64_t global_step) {
  if (!writer_) return;
  if (tensorboard_) {
    tensorboard_->add_scalar("epoch/loss_train", r.loss, global_step);
    tensorboard_->add_scalar("epoch/accuracy_train", r.accuracy, global_step);
    tensorboard_->add_scalar("epoch/images_per_sec", r.images_per_sec, global_step);
    tensorboard_->add_scalar("epoch/time_s", r.seconds, global_step);
    if (r.test_accuracy) tensorboard_->add_scalar("test/accuracy", *r.test_accuracy, global_step);
    if (r.test_accuracy_ema)
      tensorboard_->add_scalar("test/accuracy_ema", *r.test_accuracy_ema, global_step);
    for (const auto& [name, value] : r.plan_metrics)
      tensorboard_->add_scalar("plan/" + name, value, global_step);
    tensorboard_->flush();
  }
  if (metrics_json_.empty()) return;
  nlohmann::json line = {{"epoch", r.epoch},
                         {"time_s", r.seconds},
                         {"loss_train", r.loss},
                         {"accuracy_train", r.accuracy},
                         {"images_per_sec", r.images_per_sec},
                         {"data_wait_s", r.data_wait_s},
                         {"world_size", world_size_},
                         {"global_step", global_step}};
  if (r.test_accuracy) line["accuracy_test"] = *r.test_accuracy;
  if (r.mfu) line["mfu"] = *r.mfu;
  if (r.test_accuracy_ema) line["accuracy_test_ema"] = *r.test_accuracy_ema;
  for (const auto& [name, value] : r.plan_metrics) line[name] = value;
  std::ofstream out(metrics_json_, std::ios::app);
  DDPX_CHECK(out.good(), ErrorKind::kIo, "--metrics_json {}: cannot open for appending",
             metrics_json_);
  out << line.dump() << "\n";
}

std::optional<double> gpu_memory_gib(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  const auto stats = at::accelerator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
             .current /
         1073741824.0;
}

StepPoint interval_point(const MetricSums& now, const MetricSums& before, double seconds,
                         int64_t steps, int64_t global_step, double lr, int replicas,
                         const torch::Device& device) {
  MetricSums interval;
  interval.loss_sum = now.loss_sum - before.loss_sum;
  interval.correct = now.correct - before.correct;
  interval.count = now.count - before.count;
  interval.inputs = now.inputs - before.inputs;
  StepPoint p;
  p.step = global_step;
  p.loss = interval.loss();
  p.accuracy = interval.accuracy();
  p.learning_rate = lr;
  p.images_per_sec = interval.inputs * replicas / std::max(seconds, 1e-9);
  p.step_time_s = seconds / static_cast<double>(steps);
  p.gpu_memory_gib = gpu_memory_gib(device);
  return p;
}

}  // namespace ddpx::train
