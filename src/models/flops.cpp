// Counting forward FLOPs through ATen's RecordFunction callbacks (see flops.h).
#include "models/flops.h"

#include <ATen/record_function.h>

#include <cstring>

namespace ddpx::models {
namespace {

thread_local double g_flops = 0;

std::vector<int64_t> sizes_of(const c10::IValue& value) {
  if (!value.isTensor()) return {};
  auto sizes = value.toTensor().sizes();
  return {sizes.begin(), sizes.end()};
}

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) { return nullptr; }

// Leaf ops only: aten::conv2d -> aten::convolution -> a backend op; aten::linear -> aten::addmm
// (aten::matmul -> aten::mm/bmm), so each multiply is counted once.
void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  const char* name = fn.name();
  const auto inputs = fn.inputs();
  const auto& outputs = fn.outputs();
  if (std::strcmp(name, "aten::convolution") == 0 && inputs.size() >= 2 && !outputs.empty()) {
    // weight (Cout, Cin/groups, k...); output (N, Cout, spatial...)
    const auto weight = sizes_of(inputs[1]);
    const auto out = sizes_of(outputs[0]);
    if (weight.size() >= 3 && !out.empty()) g_flops += 2.0 * product(out) * product(weight, 1);
  } else if ((std::strcmp(name, "aten::addmm") == 0 && inputs.size() >= 3) ||
             (std::strcmp(name, "aten::mm") == 0 && inputs.size() >= 2)) {
    const size_t first = std::strcmp(name, "aten::addmm") == 0 ? 1 : 0;
    const auto a = sizes_of(inputs[first]);
    const auto b = sizes_of(inputs[first + 1]);
    if (a.size() == 2 && b.size() == 2) g_flops += 2.0 * a[0] * a[1] * b[1];
  } else if ((std::strcmp(name, "aten::bmm") == 0 && inputs.size() >= 2) ||
             (std::strcmp(name, "aten::baddbmm") == 0 && inputs.size() >= 3)) {
    const size_t first = std::strcmp(name, "aten::baddbmm") == 0 ? 1 : 0;
    const auto a = sizes_of(inputs[first]);
    const auto b = sizes_of(inputs[first + 1]);
    if (a.size() == 3 && b.size() == 3) g_flops += 2.0 * a[0] * a[1] * a[2] * b[2];
  }
}

}  // namespace

double count_forward_flops(torch::nn::AnyModule& model, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  g_flops = 0;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                               .needsInputs(true)
                                               .needsOutputs(true)
                                               .scopes({at::RecordScope::FUNCTION}));
  try {
    model.forward(input);
  } catch (...) {
    at::removeCallback(handle);
    throw;
  }
  at::removeCallback(handle);
  return g_flops;
}

}  // namespace ddpx::models
