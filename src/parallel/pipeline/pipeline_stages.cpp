// The pipeline plan's stages as measured and shown (see pipeline_plan.h): each layer's cost,
// timed on rank 0 or counted in parameters, for the stage split; and the stage table rank 0
// prints at start.
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/timer.h"
#include "distributed/context.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/placement.h"

namespace ddpx::parallel {
namespace {

void synchronize_device(const torch::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

int64_t numel_of(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

}  // namespace

std::vector<double> PipelinePlan::layer_costs() {
  std::vector<double> costs(layers_.size(), 0);
  if (options_.balance == PipelineBalance::kParams || options_.sample_shape.empty()) {
    for (size_t l = 0; l < layers_.size(); ++l)
      costs[l] = static_cast<double>(numel_of(layers_[l].parameters));
    return costs;
  }
  // Rank 0 times each layer's forward and backward on one micro-batch of zeros, in evaluation
  // mode (no BatchNorm statistics or dropout draws change), and the ranks split by its figures.
  if (context_.rank() == 0) {
    auto params = model_.ptr()->parameters();
    const torch::Device home = params.empty() ? torch::Device(torch::kCPU) : params[0].device();
    // Timed where the stage will run; a model in host memory visits it a layer at a time.
    const torch::Device device = options_.device.value_or(home);
    const bool visit = device != home;
    const bool training = model_.ptr()->is_training();
    model_.ptr()->eval();
    std::vector<int64_t> shape{std::max<int64_t>(options_.micro_batch, 1)};
    shape.insert(shape.end(), options_.sample_shape.begin(), options_.sample_shape.end());
    torch::Tensor x =
        torch::zeros(shape, torch::TensorOptions().dtype(options_.sample_dtype).device(device));
    for (size_t l = 0; l < layers_.size(); ++l) {
      std::vector<torch::Tensor> layer = layers_[l].parameters;
      layer.insert(layer.end(), layers_[l].buffers.begin(), layers_[l].buffers.end());
      if (visit) place_tensors(layer, device, options_.channels_last);
      torch::Tensor out;
      // The first round warms up; the layer costs the least of the others (on one H200 shared
      // by two ranks, one round each timed ResNet-18's stem as long as the other 9 layers).
      costs[l] = std::numeric_limits<double>::infinity();
      for (int round = 0; round < 3; ++round) {
        torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
        synchronize_device(device);
        Stopwatch watch;
        out = layers_[l].forward(in);
        if (out.requires_grad()) out.backward(torch::ones_like(out));
        synchronize_device(device);
        if (round > 0) costs[l] = std::min(costs[l], watch.seconds());
      }
      x = out.detach();
      if (visit) {  // back to host memory, without the gradients the rounds left
        for (auto& p : layers_[l].parameters) p.mutable_grad().reset();
        place_tensors(layer, home, /*channels_last=*/false);
      }
    }
    for (auto& p : params) p.mutable_grad().reset();
    if (training) model_.ptr()->train();
  }
  torch::Tensor shared = torch::tensor(costs, torch::kFloat64);
  context_.broadcast(shared, 0);
  return std::vector<double>(shared.data_ptr<double>(), shared.data_ptr<double>() + shared.numel());
}

std::vector<std::string> PipelinePlan::stage_table_lines() const {
  const bool timed = !table_.empty() && table_[0].cost_ms > 0;
  const int tensor = mesh_.job().size(MeshDim::kTensor);
  std::vector<std::string> lines;
  lines.push_back(fmt::format(
      "pipeline: {} stages on {} ranks a replica, {} replica{}{}", table_.size(), options_.stages,
      replica_count_, replica_count_ == 1 ? "" : "s",
      tensor > 1
          ? fmt::format(" (each stage split over {} tensor ranks; parameters: a rank's pieces)",
                        tensor)
          : ""));
  lines.push_back(fmt::format("  {:>5}  {:>12}  {:<44}  {:>12}  {:>9}", "stage", "ranks", "layers",
                              "parameters", timed ? "ms" : ""));
  for (const auto& s : table_) {
    std::string ranks;
    // The stage's rank in each replica, by replica.
    const std::vector<int> replicas =
        mesh_.group_of(mesh_.rank_with(context_.rank(), MeshDim::kPipeline, s.pipeline_rank),
                       {MeshDim::kReplicate, MeshDim::kShard});
    for (int d = 0; d < replica_count_; ++d) {
      // With tensor-parallel stages, the job's ranks that run each stage together: "0-1".
      const std::vector<int> group = mesh_.job_group(replicas[d], MeshDim::kTensor);
      ranks += (d ? "," : "") + std::to_string(group.front());
      if (tensor > 1) ranks += "-" + std::to_string(group.back());
    }
    const std::string layers =
        s.end_layer - s.first_layer == 1
            ? s.first_name
            : fmt::format("{} .. {} ({})", s.first_name, s.last_name, s.end_layer - s.first_layer);
    lines.push_back(fmt::format("  {:>5}  {:>12}  {:<44}  {:>12}  {:>9}", s.stage, ranks, layers,
                                s.parameters, timed ? fmt::format("{:.2f}", s.cost_ms) : ""));
  }
  return lines;
}

}  // namespace ddpx::parallel
