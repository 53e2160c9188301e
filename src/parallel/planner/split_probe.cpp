// `ddpx plan`'s probes of the split plans (see split_probe.h).
#include "parallel/planner/split_probe.h"

#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "distributed/context.h"
#include "distributed/thread_ranks.h"
#include "models/layer_sequence.h"
#include "optim/amp.h"
#include "parallel/planner/tensor_bytes.h"
#include "parallel/storage.h"
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

// The split layers' probes run at a batch whose activations come to kLayerProbeBytes at least,
// up to kLayerProbeBatch (and twice it): the tensor ranks' collective buffers come and go beside
// a layer's bytes, which for a small model at batch 2 are few enough for them to move the fit;
// a large model's are not, and its layers at batch 8 and 16 would take minutes.
constexpr int64_t kLayerProbeBatch = 8;
constexpr double kLayerProbeBytes = 64.0 * (1 << 20);

int64_t layer_probe_batch(int64_t small, double bytes_small, double bytes_large) {
  const double per_sample = (bytes_large - bytes_small) / static_cast<double>(small);
  if (per_sample <= 0) return std::max(small, kLayerProbeBatch);
  const auto wanted = static_cast<int64_t>(std::ceil(kLayerProbeBytes / per_sample));
  return std::max(small, std::min(wanted, kLayerProbeBatch));
}

optim::Amp amp_of(const ProbeOptions& o) { return o.amp ? optim::Amp::kBf16 : optim::Amp::kOff; }

struct LayerPoint {
  double held = 0, extra = 0, input = 0, seconds = 0;
};

// Where probe_layers() reads a rank's bytes: the process's, or a thread rank's tag (whose peak is
// reset for every tag at once, so the ranks meet around it).
struct ByteCounter {
  std::function<int64_t()> current, peak;
  std::function<void()> reset_peak;
};

ByteCounter process_counter(CpuTensorBytes& bytes) {
  return {[&bytes] { return bytes.current(); }, [&bytes] { return bytes.peak(); },
          [&bytes] { bytes.reset_peak(); }};
}

using LossFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

// Every layer at `batch`, one after the other, each on the previous one's output (detached).
// A layer that repeats the one before it (models::repeats()), when that one gave back its input's
// shape, sees the same input and holds the same bytes: from the third copy in a run on, its
// figures are the previous layer's, not probed, and the previous output goes on to the next
// layer. (The first copy's figures also hold what a split layer's first call allocates: copied
// from it, ViT-B/16's pipelines of tensor-parallel stages came out 18% higher.) ViT-B/16's plan on
// 8 GPUs took 47 s of a 2-core CPU with ten of its twelve blocks copied, 72 s probing each.
// `seeded`: the inputs drawn from seed 0 (not on thread ranks, which share the generator).
// `loss`: the last layer's output to the loss (a vocabulary-parallel split's own).
std::vector<LayerPoint> probe_layers(const std::vector<models::Layer>& layers,
                                     const std::vector<bool>& recomputed, const ProbeOptions& o,
                                     int64_t batch, const ByteCounter& bytes, bool seeded = true,
                                     const LossFn& loss = probe_loss) {
  if (seeded) torch::manual_seed(0);
  ProbeBatch inputs = probe_batch(o, batch);
  torch::Tensor x = inputs.input;
  const torch::Tensor& y = inputs.labels;
  std::vector<LayerPoint> points(layers.size());
  bool kept_shape = false;  // the previous layer's output is its input's shape
  for (size_t l = 0; l < layers.size(); ++l) {
    if (l > 1 && l + 1 < layers.size() && kept_shape && recomputed[l] == recomputed[l - 1] &&
        models::repeats(layers[l - 2], layers[l - 1]) &&
        models::repeats(layers[l - 1], layers[l])) {
      points[l] = points[l - 1];
      continue;
    }
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
      target = l + 1 == layers.size() ? loss(out, y) : out;
    }
    // A pipeline's last stage keeps only the output's predictions past the loss: the output
    // itself stays only where the loss's backward saved it.
    if (l + 1 == layers.size()) out = torch::Tensor();
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
    kept_shape = out.defined() && out.sizes() == in.sizes();
    if (out.defined()) x = out.detach();
  }
  return points;
}

// A layer's name and parameter count.
struct LayerName {
  std::string name;
  int64_t parameters = 0;
};

std::vector<LayerName> names_of(const std::vector<models::Layer>& layers) {
  std::vector<LayerName> out;
  for (const auto& layer : layers) {
    out.push_back({layer.name, 0});
    for (const auto& p : layer.parameters) out.back().parameters += p.numel();
  }
  return out;
}

// The layers' memory through probes at two batches (`a` at `small`, `b` at twice that).
std::vector<LayerMemory> fit_layers(const std::vector<LayerName>& layers,
                                    const std::vector<bool>& recomputed,
                                    const std::vector<LayerPoint>& a,
                                    const std::vector<LayerPoint>& b, int64_t small) {
  const int64_t large = 2 * small;
  std::vector<LayerMemory> out(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerMemory& m = out[l];
    m.name = layers[l].name;
    m.parameters = layers[l].parameters;
    m.seconds = a[l].seconds;
    m.recomputed = recomputed[l];
    m.held = LinearFit::through(small, a[l].held, large, b[l].held);
    m.backward_extra = LinearFit::through(small, a[l].extra, large, b[l].extra);
    m.input = LinearFit::through(small, a[l].input, large, b[l].input);
  }
  return out;
}

// The larger of two probes' figures, layer by layer (thread ranks: the rank that holds most).
void keep_larger(std::vector<LayerPoint>& into, const std::vector<LayerPoint>& other) {
  for (size_t l = 0; l < into.size(); ++l) {
    into[l].held = std::max(into[l].held, other[l].held);
    into[l].extra = std::max(into[l].extra, other[l].extra);
    into[l].input = std::max(into[l].input, other[l].input);
  }
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
  DDPX_CHECK(o.batch_small > 0 && (o.image_size > 0 || o.seq_len > 0), ErrorKind::kUsage,
             "plan: the probe needs a positive batch and image size");
  std::vector<bool> recomputed(layers->size());
  for (size_t l = 0; l < layers->size(); ++l)
    recomputed[l] = models::checkpoints_layer(checkpointing, l, layers->size());
  model.ptr()->train();
  zero_grads(model.ptr()->parameters());
  CpuTensorBytes bytes;
  const ByteCounter counter = process_counter(bytes);
  probe_layers(*layers, recomputed, o, o.batch_small, counter);  // warms caches
  const auto a = probe_layers(*layers, recomputed, o, o.batch_small, counter);
  const auto b = probe_layers(*layers, recomputed, o, 2 * o.batch_small, counter);
  return fit_layers(names_of(*layers), recomputed, a, b, o.batch_small);
}

std::vector<TensorMemory> measure_tensor_parallel(
    const std::function<torch::nn::AnyModule()>& build, int ranks,
    const std::vector<bool>& sequence_modes, const ProbeOptions& o, const std::string& model_name,
    const models::ActivationCheckpointing& checkpointing, bool layers, torch::nn::AnyModule first) {
  DDPX_CHECK(o.batch_small > 0 && (o.image_size > 0 || o.seq_len > 0), ErrorKind::kUsage,
             "plan: the probe needs a positive batch and image size");
  DDPX_CHECK(!sequence_modes.empty(), ErrorKind::kInternal, "plan: a tensor probe of no mode");
  if (first.is_empty()) first = build();  // rank 0's, checked before any thread starts
  for (bool sequence : sequence_modes) tensor::check_splittable(first, ranks, model_name, sequence);
  const size_t modes = sequence_modes.size();
  std::vector<TensorMemory> out(modes);
  int64_t whole_parameters = 0;
  for (const auto& p : first.ptr()->parameters()) whole_parameters += p.numel();
  for (size_t k = 0; k < modes; ++k) {
    out[k].ranks = ranks;
    out[k].sequence_parallel = sequence_modes[k];
    out[k].whole_parameters = whole_parameters;
  }
  const std::array<int64_t, 3> batches{o.batch_small, o.batch_small, 2 * o.batch_small};
  // Each mode's passes, and with `layers` each rank's layer probes at the small and the large
  // batch.
  std::vector<std::array<double, 3>> measured(modes, std::array<double, 3>{});
  std::vector<std::vector<std::array<std::vector<LayerPoint>, 2>>> points(
      modes, std::vector<std::array<std::vector<LayerPoint>, 2>>(static_cast<size_t>(ranks)));
  std::vector<std::vector<LayerName>> rank0_layers(modes);
  std::vector<int64_t> layer_batch(modes, o.batch_small);  // set from the split model's passes
  CpuTensorBytes bytes;
  std::vector<int64_t> before(static_cast<size_t>(ranks));
  std::mutex mutex;  // one whole model at a time
  dist::run_thread_ranks(ranks, [&](dist::Context& group) {
    // Each rank as in a job: its own whole model, split (not collective) once a mode, the split
    // layers' whole parameters then freed, so the rank keeps its pieces and its own unsplit
    // layers (shared by the modes' split models, which run one after the other).
    CpuTensorBytes::tag_thread(group.rank());  // this rank's bytes, counted on their own
    std::vector<tensor::SplitModel> splits(modes);
    {
      std::lock_guard<std::mutex> lock(mutex);
      torch::nn::AnyModule whole = group.rank() == 0 ? std::move(first) : build();
      std::set<std::string> split_names;
      for (size_t k = 0; k < modes; ++k) {
        // The probe's images, so a sequence-parallel layer sequence splits their tokens; a
        // language model's vocabulary padded as ddpx train pads it.
        splits[k] = tensor::split_model(whole, group, sequence_modes[k], checkpointing,
                                        {3, o.image_size, o.image_size}, o.vocab_divisible_by);
        for (const auto& spec : splits[k].specs) split_names.insert(spec.first);
      }
      for (const auto& item : whole.ptr()->named_parameters()) {
        if (!split_names.count(item.key())) continue;
        if (group.rank() == 0) {
          for (size_t k = 0; k < modes; ++k)
            if (splits[k].specs.count(item.key())) out[k].split_parameters += item.value().numel();
        }
        free_storage(item.value());
      }
      if (group.rank() == 0) {
        for (size_t k = 0; k < modes; ++k) {
          const tensor::SplitModel& split = splits[k];
          for (const auto& p : split.module.ptr()->parameters()) out[k].parameters += p.numel();
          out[k].units = unit_params(*split.module.ptr(), [&split](const std::string& name) {
            auto spec = split.specs.find(name);
            return spec == split.specs.end() ? -1 : static_cast<int>(spec->second.dim);
          });
        }
      }
    }
    for (size_t k = 0; k < modes; ++k) {
      tensor::SplitModel& split = splits[k];
      // A vocabulary-parallel output's loss is the split model's, from this rank's logits.
      const LossFn loss_of =
          split.loss ? LossFn([&split](const torch::Tensor& out, const torch::Tensor& labels) {
            return split.loss(out, labels, 0.0);
          })
                     : LossFn(probe_loss);
      const auto params = split.module.ptr()->parameters();
      split.module.ptr()->train();
      zero_grads(params);
      for (size_t pass = 0; pass < batches.size(); ++pass) {
        const int64_t batch = batches[pass];
        const ProbeBatch inputs = probe_batch(o, batch);
        group.barrier();
        if (group.rank() == 0) {
          for (int r = 0; r < ranks; ++r) before[static_cast<size_t>(r)] = bytes.tag_current(r);
          bytes.reset_peak();
        }
        group.barrier();
        {
          torch::Tensor loss, output;  // the output kept through backward, as the trainer does
          {
            optim::AutocastGuard autocast(amp_of(o), torch::Device(torch::kCPU));
            output = split.module.forward(inputs.input);
            loss = loss_of(output, inputs.labels);
          }
          loss.backward();
        }
        group.barrier();
        if (group.rank() == 0) {
          for (int r = 0; r < ranks; ++r) {
            measured[k][pass] =
                std::max(measured[k][pass],
                         static_cast<double>(bytes.tag_peak(r) - before[static_cast<size_t>(r)]));
          }
        }
      }
      if (layers) {       // the split layers, each alone, as a pipeline of them runs them
        group.barrier();  // rank 0 has written `measured`
        if (group.rank() == 0)
          layer_batch[k] = layer_probe_batch(batches[1], measured[k][1], measured[k][2]);
        group.barrier();
        const int rank = group.rank();
        const ByteCounter counter{[&bytes, rank] { return bytes.tag_current(rank); },
                                  [&bytes, rank] { return bytes.tag_peak(rank); },
                                  [&bytes, &group] {
                                    group.barrier();
                                    if (group.rank() == 0) bytes.reset_peak();
                                    group.barrier();
                                  }};
        const std::vector<bool> none(split.layers.size(), false);  // they checkpoint themselves
        auto& mine = points[k][static_cast<size_t>(rank)];
        mine[0] = probe_layers(split.layers, none, o, layer_batch[k], counter, false, loss_of);
        mine[1] = probe_layers(split.layers, none, o, 2 * layer_batch[k], counter, false, loss_of);
        if (rank == 0) rank0_layers[k] = names_of(split.layers);
        group.barrier();  // every rank done with the last layer's collectives before any leaves
      }
      split = tensor::SplitModel{};  // its pieces freed before the next mode's passes
    }
    CpuTensorBytes::tag_thread(-1);
  });
  for (size_t k = 0; k < modes; ++k) {
    TensorMemory& m = out[k];
    m.activations = LinearFit::through(batches[1], measured[k][1], batches[2], measured[k][2]);
    if (!layers) continue;
    auto largest = points[k][0];
    for (size_t r = 1; r < points[k].size(); ++r) {
      keep_larger(largest[0], points[k][r][0]);
      keep_larger(largest[1], points[k][r][1]);
    }
    std::vector<bool> recomputed(rank0_layers[k].size());
    for (size_t l = 0; l < rank0_layers[k].size(); ++l)
      recomputed[l] = models::checkpoints_layer(checkpointing, l, rank0_layers[k].size());
    m.layers = fit_layers(rank0_layers[k], recomputed, largest[0], largest[1], layer_batch[k]);
    for (auto& layer : m.layers) layer.seconds = 0;  // ranks run at once: not a layer's time
  }
  return out;
}

TensorMemory measure_tensor_parallel(const std::function<torch::nn::AnyModule()>& build, int ranks,
                                     bool sequence_parallel, const ProbeOptions& o,
                                     const std::string& model_name,
                                     const models::ActivationCheckpointing& checkpointing,
                                     bool layers) {
  return measure_tensor_parallel(build, ranks, std::vector<bool>{sequence_parallel}, o, model_name,
                                 checkpointing, layers)
      .front();
}

TensorMemory at_tensor_size(const TensorMemory& a, const TensorMemory& b, int ranks) {
  DDPX_CHECK(
      a.ranks >= 1 && b.ranks >= 1 && ranks >= 1 && a.sequence_parallel == b.sequence_parallel,
      ErrorKind::kInternal, "plan: tensor probes at {} and {} ranks carried to {}", a.ranks,
      b.ranks, ranks);
  if (ranks == a.ranks) return a;
  TensorMemory m = a;
  m.ranks = ranks;
  const int64_t unsplit = a.whole_parameters - a.split_parameters;
  m.parameters = unsplit + a.split_parameters / ranks;
  for (auto& unit : m.units) {
    for (auto& p : unit.params) {
      if (p.tensor_dim == 0) p.rows = p.rows * a.ranks / ranks;
      if (p.tensor_dim > 0) p.row_numel = p.row_numel * a.ranks / ranks;
    }
  }
  if (a.ranks == b.ranks) {
    DDPX_CHECK(ranks == a.ranks, ErrorKind::kInternal,
               "plan: one tensor probe at {} ranks cannot be carried to {}", a.ranks, ranks);
    return a;
  }
  // A(T) = U + S/T through the two probes.
  auto fit = [&](double at_a, double at_b) {
    const double split = (at_a - at_b) / (1.0 / a.ranks - 1.0 / b.ranks);
    return at_a - split / a.ranks + split / ranks;
  };
  m.activations.fixed = fit(a.activations.fixed, b.activations.fixed);
  m.activations.per_sample = std::max(0.0, fit(a.activations.per_sample, b.activations.per_sample));
  if (a.layers.size() != b.layers.size()) {
    m.layers.clear();  // one probe without the layers: none carried
    return m;
  }
  auto carry = [&](const LinearFit& at_a, const LinearFit& at_b) {
    return LinearFit{fit(at_a.fixed, at_b.fixed),
                     std::max(0.0, fit(at_a.per_sample, at_b.per_sample))};
  };
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerMemory &la = a.layers[l], &lb = b.layers[l];
    LayerMemory& out = m.layers[l];
    out.parameters =
        std::llround(fit(static_cast<double>(la.parameters), static_cast<double>(lb.parameters)));
    out.held = carry(la.held, lb.held);
    out.backward_extra = carry(la.backward_extra, lb.backward_extra);
    out.input = carry(la.input, lb.input);
  }
  return m;
}

}  // namespace ddpx::parallel
