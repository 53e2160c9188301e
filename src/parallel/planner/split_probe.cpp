// `ddpx plan`'s probes of the split plans (see split_probe.h).
#include "parallel/planner/split_probe.h"

#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "core/error.h"
#include "core/timer.h"
#include "distributed/context.h"
#include "distributed/thread_ranks.h"
#include "models/layer_sequence.h"
#include "optim/amp.h"
#include "parallel/planner/tensor_bytes.h"
#include "parallel/tensor/parallelize.h"

namespace ddpx::parallel {
namespace {

void zero_grads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    if (!p.requires_grad()) continue;
    if (p.grad().defined()) {
      p.mutable_grad().zero_();
    } else {
      p.mutable_grad() = torch::zeros_like(p);
    }
  }
}

optim::Amp amp_of(const ProbeOptions& o) { return o.amp ? optim::Amp::kBf16 : optim::Amp::kOff; }

struct LayerPoint {
  double held = 0, extra = 0, input = 0, seconds = 0;
};

// Every layer at `batch`, one after the other, each on the previous one's output (detached).
std::vector<LayerPoint> probe_layers(const std::vector<models::Layer>& layers,
                                     const std::vector<bool>& recomputed, const ProbeOptions& o,
                                     int64_t batch, CpuTensorBytes& bytes) {
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({batch, 3, o.image_size, o.image_size});
  const auto y = torch::randint(o.num_classes, {batch}, torch::kLong);
  std::vector<LayerPoint> points(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerPoint& p = points[l];
    torch::Tensor in = l == 0 ? x : x.detach().requires_grad_(true);
    p.input = l == 0 ? 0 : static_cast<double>(in.nbytes());
    const int64_t before = bytes.current();
    Stopwatch watch;
    torch::Tensor out, target;
    {
      optim::AutocastGuard autocast(amp_of(o), torch::Device(torch::kCPU));
      out = recomputed[l] ? models::checkpoint(layers[l].forward, in, layers[l].buffers)
                          : layers[l].forward(in);
      target = l + 1 == layers.size() ? torch::nn::functional::cross_entropy(out, y) : out;
    }
    p.held = static_cast<double>(bytes.current() - before);
    bytes.reset_peak();
    if (target.requires_grad()) {
      if (target.dim() == 0) {
        target.backward();
      } else {
        target.backward(torch::ones_like(target));
      }
    }
    p.seconds = watch.seconds();
    p.extra = std::max(0.0, static_cast<double>(bytes.peak() - before) - p.held);
    x = out.detach();
  }
  return points;
}

}  // namespace

LinearFit LinearFit::through(int64_t batch_a, double bytes_a, int64_t batch_b, double bytes_b) {
  LinearFit fit;
  fit.per_sample = (bytes_b - bytes_a) / static_cast<double>(batch_b - batch_a);
  fit.fixed = bytes_a - fit.per_sample * static_cast<double>(batch_a);
  if (fit.per_sample < 0) {  // noise on a tiny layer: the larger figure, flat
    fit.per_sample = 0;
    fit.fixed = std::max(bytes_a, bytes_b);
  }
  return fit;
}

std::optional<std::vector<LayerMemory>> measure_layers(
    torch::nn::AnyModule& model, const ProbeOptions& o,
    const models::ActivationCheckpointing& checkpointing) {
  auto layers = models::layer_sequence(model);
  if (!layers) return std::nullopt;
  DDPX_CHECK(o.batch_small > 0 && o.image_size > 0, ErrorKind::kUsage,
             "plan: the probe needs a positive batch and image size");
  std::vector<bool> recomputed(layers->size());
  for (size_t l = 0; l < layers->size(); ++l)
    recomputed[l] = models::checkpoints_layer(checkpointing, l, layers->size());
  model.ptr()->train();
  zero_grads(model.ptr()->parameters());
  CpuTensorBytes bytes;
  probe_layers(*layers, recomputed, o, o.batch_small, bytes);  // warms caches
  const int64_t small = o.batch_small, large = 2 * o.batch_small;
  const auto a = probe_layers(*layers, recomputed, o, small, bytes);
  const auto b = probe_layers(*layers, recomputed, o, large, bytes);
  std::vector<LayerMemory> out(layers->size());
  for (size_t l = 0; l < layers->size(); ++l) {
    LayerMemory& m = out[l];
    m.name = (*layers)[l].name;
    for (const auto& p : (*layers)[l].parameters) m.parameters += p.numel();
    m.seconds = a[l].seconds;
    m.recomputed = recomputed[l];
    m.held = LinearFit::through(small, a[l].held, large, b[l].held);
    m.backward_extra = LinearFit::through(small, a[l].extra, large, b[l].extra);
    m.input = LinearFit::through(small, a[l].input, large, b[l].input);
  }
  return out;
}

TensorMemory measure_tensor_parallel(const torch::nn::AnyModule& whole, int ranks,
                                     bool sequence_parallel, const ProbeOptions& o,
                                     const std::string& model_name) {
  DDPX_CHECK(o.batch_small > 0 && o.image_size > 0, ErrorKind::kUsage,
             "plan: the probe needs a positive batch and image size");
  tensor::check_splittable(whole, ranks, model_name, sequence_parallel);
  TensorMemory m;
  m.ranks = ranks;
  m.sequence_parallel = sequence_parallel;
  for (const auto& p : whole.ptr()->parameters()) m.whole_parameters += p.numel();
  const std::array<int64_t, 3> batches{o.batch_small, o.batch_small, 2 * o.batch_small};
  std::array<double, 3> measured{};
  CpuTensorBytes bytes;
  int64_t before = 0;
  std::mutex mutex;
  dist::run_thread_ranks(ranks, [&](dist::Context& group) {
    // The ranks split the one whole model: its unsplit layers are shared by all of them, as each
    // rank's are with its own whole model in a job.
    tensor::SplitModel split = tensor::split_model(whole, group, sequence_parallel);
    const auto params = split.module.ptr()->parameters();
    if (group.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& p : params) m.parameters += p.numel();
      for (const auto& item : whole.ptr()->named_parameters()) {
        if (split.specs.count(item.key())) m.split_parameters += item.value().numel();
      }
    }
    split.module.ptr()->train();
    group.barrier();
    if (group.rank() == 0) zero_grads(whole.ptr()->parameters());
    zero_grads(params);
    for (size_t pass = 0; pass < batches.size(); ++pass) {
      const int64_t batch = batches[pass];
      const auto x = torch::randn({batch, 3, o.image_size, o.image_size});
      const auto y = torch::randint(o.num_classes, {batch}, torch::kLong);
      group.barrier();
      if (group.rank() == 0) {
        before = bytes.current();
        bytes.reset_peak();
      }
      group.barrier();
      {
        torch::Tensor loss;
        {
          optim::AutocastGuard autocast(amp_of(o), torch::Device(torch::kCPU));
          loss = torch::nn::functional::cross_entropy(split.module.forward(x), y);
        }
        loss.backward();
      }
      group.barrier();
      if (group.rank() == 0) measured[pass] = static_cast<double>(bytes.peak() - before) / ranks;
    }
  });
  m.activations = LinearFit::through(batches[1], measured[1], batches[2], measured[2]);
  return m;
}

TensorMemory at_tensor_size(const TensorMemory& probed, const LinearFit& whole, int ranks) {
  DDPX_CHECK(probed.ranks >= 2 && ranks >= 1, ErrorKind::kInternal,
             "plan: a tensor probe at {} ranks scaled to {}", probed.ranks, ranks);
  TensorMemory m = probed;
  m.ranks = ranks;
  const int64_t unsplit = probed.whole_parameters - probed.split_parameters;
  m.parameters = unsplit + (probed.parameters - unsplit) * probed.ranks / ranks;
  // A(T) = U + S/T through A(1) = the whole model's and A(T0) = the probe's.
  auto scale = [&](double at_one, double at_probe) {
    const double t0 = probed.ranks;
    const double split = (at_one - at_probe) * t0 / (t0 - 1);
    return at_one - split + split / ranks;
  };
  m.activations.fixed = scale(whole.fixed, probed.activations.fixed);
  m.activations.per_sample = std::max(0.0, scale(whole.per_sample, probed.activations.per_sample));
  return m;
}

}  // namespace ddpx::parallel
