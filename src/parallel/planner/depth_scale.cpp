// A shallow, short probe carried to a deep model's depth and sequence (see depth_scale.h).
#include "parallel/planner/depth_scale.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace ddpx::parallel {
namespace {

// x(L) through x(1) and x(2).
double at_depth(double one, double two, int64_t blocks) {
  return two + static_cast<double>(blocks - kProbedBlocks) * (two - one);
}

int64_t at_depth(int64_t one, int64_t two, int64_t blocks) {
  return two + (blocks - kProbedBlocks) * (two - one);
}

// A fit's per-sample bytes carried to T tokens, its fixed bytes as they are.
LinearFit at_tokens(const LinearFit& fit, const DepthScale& s) {
  return {fit.fixed, fit.per_sample * s.token_ratio()};
}

LinearFit at_depth(const LinearFit& one, const LinearFit& two, const DepthScale& s) {
  return at_tokens({at_depth(one.fixed, two.fixed, s.blocks),
                    std::max(0.0, at_depth(one.per_sample, two.per_sample, s.blocks))},
                   s);
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The prefix of a second block's name ("transformer.h." of "transformer.h.1"), or "".
std::string second_block_prefix(const std::string& name) {
  const std::string tail = "." + std::to_string(kProbedBlocks - 1);
  return ends_with(name, tail) ? name.substr(0, name.size() - tail.size() + 1) : std::string();
}

// The two-block model's units with the second block's unit repeated to L blocks.
std::vector<UnitParams> units_at_depth(const std::vector<UnitParams>& two, int64_t blocks) {
  std::vector<UnitParams> out;
  for (const auto& unit : two) {
    out.push_back(unit);
    const std::string prefix = second_block_prefix(unit.name);
    if (prefix.empty()) continue;
    for (int64_t b = kProbedBlocks; b < blocks; ++b) {
      out.push_back(unit);
      out.back().name = prefix + std::to_string(b);
    }
  }
  return out;
}

}  // namespace

ModelMemory scale_model(const ModelMemory& one, const ModelMemory& two, const DepthScale& s) {
  if (!s.active()) return two;
  ModelMemory m = two;
  m.parameters = at_depth(one.parameters, two.parameters, s.blocks);
  m.units = units_at_depth(two.units, s.blocks);
  const LinearFit fit = at_depth({one.activation_fixed, one.activation_per_sample},
                                 {two.activation_fixed, two.activation_per_sample}, s);
  m.activation_fixed = fit.fixed;
  m.activation_per_sample = fit.per_sample;
  m.sample_bytes = two.sample_bytes * s.token_ratio();
  return m;
}

std::vector<LayerMemory> scale_layers(const std::vector<LayerMemory>& two, const DepthScale& s) {
  if (!s.active()) return two;
  std::vector<LayerMemory> out;
  for (const auto& layer : two) {
    LayerMemory carried = layer;
    carried.held = at_tokens(layer.held, s);
    carried.backward_extra = at_tokens(layer.backward_extra, s);
    carried.input = at_tokens(layer.input, s);
    carried.seconds = layer.seconds * s.token_ratio();
    out.push_back(carried);
    const std::string prefix = second_block_prefix(layer.name);
    if (prefix.empty()) continue;
    for (int64_t b = kProbedBlocks; b < s.blocks; ++b) {
      out.push_back(carried);
      out.back().name = prefix + std::to_string(b);
    }
  }
  DDPX_CHECK(static_cast<int64_t>(out.size()) ==
                 static_cast<int64_t>(two.size()) + s.blocks - kProbedBlocks,
             ErrorKind::kInternal, "plan: found no second block among the probe's {} layers",
             two.size());
  return out;
}

TensorMemory scale_tensor(const TensorMemory& one, const TensorMemory& two, const DepthScale& s) {
  if (!s.active()) return two;
  TensorMemory m = two;
  m.whole_parameters = at_depth(one.whole_parameters, two.whole_parameters, s.blocks);
  m.parameters = at_depth(one.parameters, two.parameters, s.blocks);
  m.split_parameters = at_depth(one.split_parameters, two.split_parameters, s.blocks);
  m.activations = at_depth(one.activations, two.activations, s);
  m.units = units_at_depth(two.units, s.blocks);
  if (!two.layers.empty()) m.layers = scale_layers(two.layers, s);
  return m;
}

}  // namespace ddpx::parallel
