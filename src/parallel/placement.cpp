// Model and batch placement (see placement.h).
#include "parallel/placement.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <map>
#include <mutex>
#include <utility>

#include "core/timer.h"

namespace ddpx::parallel {
namespace {

torch::Tensor with_format(const torch::Tensor& t, bool channels_last) {
  return channels_last && t.dim() == 4 ? t.contiguous(torch::MemoryFormat::ChannelsLast) : t;
}

// One copy stream per device for the process: the caching allocator keeps freed blocks per
// stream, so a new pool stream every epoch (DeviceFeeder lives one epoch) would leave the
// previous epochs' batch blocks reserved and unused.
c10::Stream copy_stream_for(const torch::Device& device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, c10::Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{static_cast<int>(device.type()), device.index()};
  auto it = streams.find(key);
  if (it == streams.end()) {
    c10::impl::VirtualGuardImpl impl(device.type());
    it = streams.emplace(key, impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false)).first;
  }
  return it->second;
}

}  // namespace

void place_model(torch::nn::Module& model, const torch::Device& device, bool channels_last) {
  model.to(device);
  if (!channels_last) return;
  torch::NoGradGuard no_grad;
  // set_data keeps each parameter's identity (optimizers and hooks hold it).
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(with_format(p, true));
  }
  for (auto& b : model.buffers()) {
    if (b.dim() == 4) b.set_data(with_format(b, true));
  }
}

void place_tensors(const std::vector<torch::Tensor>& tensors, const torch::Device& device,
                   bool channels_last) {
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    if (t.defined()) t.set_data(with_format(t.to(device), channels_last));
  }
}

DeviceFeeder::DeviceFeeder(data::DataLoader& loader, const torch::Device& device,
                           bool channels_last)
    : loader_(loader), device_(device), channels_last_(channels_last) {
  if (!device_.is_cpu()) copy_stream_ = copy_stream_for(device_);
}

std::optional<DeviceFeeder::Staged> DeviceFeeder::stage() {
  Stopwatch watch;
  std::optional<data::Batch> host = loader_.next();
  wait_seconds_ += watch.seconds();
  if (!host) return std::nullopt;
  Staged staged;
  if (!copy_stream_) {
    staged.batch = data::Batch{with_format(host->images, channels_last_), host->labels};
    return staged;
  }
  c10::StreamGuard on_copy_stream(*copy_stream_);
  staged.batch.images =
      with_format(host->images.to(device_, /*non_blocking=*/true), channels_last_);
  staged.batch.labels = host->labels.to(device_, /*non_blocking=*/true);
  staged.copied.emplace(device_.type());
  staged.copied->record(*copy_stream_);
  return staged;
}

std::optional<data::Batch> DeviceFeeder::next() {
  if (!primed_) {
    staged_ = stage();
    primed_ = true;
  }
  if (!staged_) return std::nullopt;
  Staged current = std::move(*staged_);
  if (current.copied) {
    c10::impl::VirtualGuardImpl impl(device_.type());
    const c10::Stream compute = impl.getStream(device_);
    current.copied->block(compute);
    // The tensors were allocated on the copy stream and are used on the compute stream.
    current.batch.images.record_stream(compute);
    current.batch.labels.record_stream(compute);
  }
  staged_ = stage();  // the following batch's copy overlaps this step
  return std::move(current.batch);
}

}  // namespace ddpx::parallel
