// `ddpx plan`'s measurements and arithmetic (see memory_plan.h).
#include "parallel/planner/memory_plan.h"

#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "core/error.h"
#include "optim/amp.h"
#include "parallel/planner/tensor_bytes.h"
#include "parallel/sharded/units.h"

namespace ddpx::parallel {
namespace {

constexpr double kFp32 = 4;

// One forward, loss and backward at `batch` into allocated, zeroed gradients (as DDP's gradient
// buckets and ZeRO-1's whole gradients stay between steps); returns the peak tensor bytes above
// the parameters and gradients: saved activations and backward's temporaries.
int64_t probe(torch::nn::AnyModule& model, const ProbeOptions& o, int64_t batch,
              CpuTensorBytes& bytes) {
  torch::manual_seed(0);
  const ProbeBatch b = probe_batch(o, batch);
  for (auto& p : model.ptr()->parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
  const int64_t before = bytes.current();
  bytes.reset_peak();
  {
    // The output lives through backward, as the trainer keeps it for the accuracy (a language
    // model's logits: B x T x V, as many bytes again as the loss's log-softmax).
    torch::Tensor loss, output;
    {
      optim::AutocastGuard autocast(o.amp ? optim::Amp::kBf16 : optim::Amp::kOff,
                                    torch::Device(torch::kCPU));
      output = model.forward(b.input);
      loss = probe_loss(output, b.labels);
    }
    loss.backward();
  }
  // x and y are counted in `before` (predict() adds the batch itself: ModelMemory::sample_bytes).
  return std::max<int64_t>(0, bytes.peak() - before);
}

int64_t shard_elements(const UnitParams& unit, int world) {
  int64_t n = 0;
  for (const auto& p : unit.params) n += (p.rows + world - 1) / world * p.row_numel;
  return n;
}

}  // namespace

ProbeBatch probe_batch(const ProbeOptions& o, int64_t batch) {
  if (o.seq_len > 0) {
    return {torch::randint(o.num_classes, {batch, o.seq_len}, torch::kLong),
            torch::randint(o.num_classes, {batch, o.seq_len}, torch::kLong)};
  }
  return {torch::randn({batch, 3, o.image_size, o.image_size}),
          torch::randint(o.num_classes, {batch}, torch::kLong)};
}

torch::Tensor probe_loss(const torch::Tensor& output, const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(output.flatten(0, -2), labels.flatten());
}

double ModelMemory::activation_bytes(int64_t batch) const {
  return std::max(0.0, activation_fixed + activation_per_sample * static_cast<double>(batch));
}

std::vector<UnitParams> unit_params(torch::nn::Module& module,
                                    const std::function<int(const std::string&)>& tensor_dim) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : module.named_parameters()) by_name[item.key()] = item.value();
  std::vector<UnitParams> units;
  for (const auto& spec : choose_units(module, {})) {
    UnitParams unit{spec.name, spec.root, {}};
    for (const auto& name : spec.param_names) {
      const auto& p = by_name.at(name);
      ParamRows rows;
      rows.rows = p.dim() == 0 ? 1 : p.size(0);
      rows.row_numel = rows.rows == 0 ? 0 : p.numel() / rows.rows;
      if (tensor_dim) rows.tensor_dim = tensor_dim(name);
      unit.params.push_back(rows);
    }
    units.push_back(std::move(unit));
  }
  return units;
}

ModelMemory measure_model(torch::nn::AnyModule& model, const ProbeOptions& o) {
  DDPX_CHECK(o.batch_small > 0 && o.image_size > 0, ErrorKind::kUsage,
             "plan: the probe needs a positive batch and image size");
  ModelMemory m;
  m.amp = o.amp;
  m.sample_bytes =
      o.seq_len > 0
          ? static_cast<double>(2 * o.seq_len * sizeof(int64_t))  // token ids and labels
          : static_cast<double>(3 * o.image_size * o.image_size * sizeof(float) + sizeof(int64_t));
  for (const auto& p : model.ptr()->parameters()) m.parameters += p.numel();
  m.units = unit_params(*model.ptr());

  model.ptr()->train();
  CpuTensorBytes bytes;
  probe(model, o, o.batch_small, bytes);  // allocates the gradients, warms caches
  m.probe_batch_small = o.batch_small;
  m.probe_batch_large = 2 * o.batch_small;
  m.probe_bytes_small = probe(model, o, m.probe_batch_small, bytes);
  m.probe_bytes_large = probe(model, o, m.probe_batch_large, bytes);
  m.activation_per_sample =
      static_cast<double>(m.probe_bytes_large - m.probe_bytes_small) / o.batch_small;
  m.activation_fixed = static_cast<double>(m.probe_bytes_small) -
                       m.activation_per_sample * static_cast<double>(m.probe_batch_small);
  if (m.activation_per_sample < 0) {  // noise on a tiny model: take the larger probe as flat
    m.activation_per_sample = 0;
    m.activation_fixed = static_cast<double>(m.probe_bytes_large);
  }
  return m;
}

ModePrediction predict(const ModelMemory& model, ShardMode mode, const PlanRequest& r) {
  DDPX_CHECK(r.world_size >= 1, ErrorKind::kUsage, "plan: --gpus must be at least 1, got {}",
             r.world_size);
  DDPX_CHECK(r.batch_size >= 1, ErrorKind::kUsage, "plan: --batch_size must be at least 1, got {}",
             r.batch_size);
  const int n = r.world_size;
  const double psi = static_cast<double>(model.parameters);
  const double k = r.optimizer_bytes_per_param;
  double shard = 0, largest = 0, root = 0;  // elements
  for (const auto& unit : model.units) {
    shard += static_cast<double>(shard_elements(unit, n));
    const double whole = static_cast<double>(shard_elements(unit, n)) * n;  // padded
    if (unit.root) {
      root = whole;
    } else {
      largest = std::max(largest, whole);
    }
  }
  largest = std::max(largest, root);

  ModePrediction p;
  p.mode = mode;
  p.start = kFp32 * psi;
  // The activations and the batch itself (images and labels), which the rank holds through them.
  p.activations =
      model.activation_bytes(r.batch_size) + model.sample_bytes * static_cast<double>(r.batch_size);
  switch (mode) {
    case ShardMode::kNone:
      p.params = kFp32 * psi;
      p.grads = kFp32 * psi;  // the reducer's buckets, the gradients their views
      p.optimizer = k * psi;
      // After the first step the reducer rebuilds its buckets in the order gradients became
      // ready (as PyTorch's DDP): old and new buckets are alive together once.
      if (n > 1) p.transient = kFp32 * psi;
      break;
    case ShardMode::kOptimizer:
      p.params = kFp32 * (psi + shard);
      p.grads = kFp32 * (psi + shard);
      p.optimizer = k * shard;
      p.transient = kFp32 * 2 * largest;
      break;
    case ShardMode::kGradients:
      p.params = kFp32 * (psi + shard);
      p.grads = kFp32 * shard;
      p.optimizer = k * shard;
      p.transient = kFp32 * 3 * largest;
      p.backward_transient = kFp32 * 2 * largest;  // its gradients and their packed copy
      break;
    case ShardMode::kFull:
      p.params = kFp32 * shard;
      p.grads = kFp32 * shard;
      p.optimizer = k * shard;
      p.transient = kFp32 * (root + 5 * largest);
      // the root, the running and the prefetched unit gathered, the running unit's gradients
      p.backward_transient = kFp32 * (root + 3 * largest);
      break;
  }
  if (n == 1 && mode != ShardMode::kNone) {  // one rank: the plan shards over itself
    p.transient = std::min(p.transient, kFp32 * 2 * largest);
  }
  p.fits = p.peak() <= r.gpu_memory - r.reserve;
  return p;
}

MemoryPlan plan_memory(const ModelMemory& model, const PlanRequest& r) {
  MemoryPlan plan;
  plan.usable = r.gpu_memory - r.reserve;
  for (ShardMode mode :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    plan.modes.push_back(predict(model, mode, r));
    if (plan.modes.back().fits && !plan.recommended) plan.recommended = mode;
  }
  if (plan.recommended) return plan;

  // Nothing fits: the batch `full` fits at this world size, and the world `full` needs.
  const ModePrediction full = plan.modes.back();
  const double room = plan.usable - (full.params + full.grads + full.optimizer);
  const double for_activations = room - full.backward_transient - model.activation_fixed;
  if (full.transient <= room && for_activations > 0 && model.activation_per_sample > 0) {
    plan.full_max_batch =
        static_cast<int64_t>(std::floor(for_activations / model.activation_per_sample));
  }
  for (int world = r.world_size + 1; world <= 4096; ++world) {
    PlanRequest more = r;
    more.world_size = world;
    if (predict(model, ShardMode::kFull, more).fits) {
      plan.full_min_world = world;
      break;
    }
  }
  return plan;
}

double parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();   // GB -> G
  if (unit.size() == 2 && unit.back() == 'I') unit.pop_back();  // GI -> G
  static const std::map<std::string, double> kScale{{"", 1.0},
                                                    {"K", 1024.0},
                                                    {"M", 1024.0 * 1024},
                                                    {"G", 1024.0 * 1024 * 1024},
                                                    {"T", 1024.0 * 1024 * 1024 * 1024}};
  const auto scale = kScale.find(unit);
  DDPX_CHECK(
      used > 0 && value >= 0 && std::isfinite(value) && scale != kScale.end(), ErrorKind::kUsage,
      "{}: expected a size such as 80G, 40GiB or 81920M (binary units), got '{}'", flag, text);
  return value * scale->second;
}

}  // namespace ddpx::parallel
