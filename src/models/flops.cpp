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

enum class Op { kOther, kConvolution, kAddmm, kMm, kBmm, kBaddbmm };

Op op_of(const char* name) {
  if (std::strcmp(name, "aten::convolution") == 0) return Op::kConvolution;
  if (std::strcmp(name, "aten::addmm") == 0) return Op::kAddmm;
  if (std::strcmp(name, "aten::mm") == 0) return Op::kMm;
  if (std::strcmp(name, "aten::bmm") == 0) return Op::kBmm;
  if (std::strcmp(name, "aten::baddbmm") == 0) return Op::kBaddbmm;
  return Op::kOther;
}

// The inputs' shapes, taken when the op starts (its arguments are gone when it ends).
struct Shapes : at::ObserverContext {
  Op op = Op::kOther;
  std::vector<std::vector<int64_t>> inputs;
};

// Leaf ops only: aten::conv2d -> aten::convolution -> a backend op; aten::linear -> aten::addmm
// (aten::matmul -> aten::mm/bmm), so each multiply is counted once.
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const Op op = op_of(fn.name());
  if (op == Op::kOther) return nullptr;
  auto shapes = std::make_unique<Shapes>();
  shapes->op = op;
  for (const auto& input : fn.inputs()) shapes->inputs.push_back(sizes_of(input));
  return shapes;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* shapes = static_cast<Shapes*>(context);
  if (shapes == nullptr) return;
  const auto& in = shapes->inputs;
  switch (shapes->op) {
    case Op::kConvolution: {
      // weight (Cout, Cin/groups, k...); output (N, Cout, spatial...)
      if (in.size() < 2 || fn.outputs().empty()) return;
      const auto out = sizes_of(fn.outputs()[0]);
      if (in[1].size() >= 3 && !out.empty()) g_flops += 2.0 * product(out) * product(in[1], 1);
      return;
    }
    case Op::kAddmm:
    case Op::kMm: {
      const size_t first = shapes->op == Op::kAddmm ? 1 : 0;
      if (in.size() < first + 2) return;
      const auto &a = in[first], &b = in[first + 1];
      if (a.size() == 2 && b.size() == 2) g_flops += 2.0 * a[0] * a[1] * b[1];
      return;
    }
    case Op::kBmm:
    case Op::kBaddbmm: {
      const size_t first = shapes->op == Op::kBaddbmm ? 1 : 0;
      if (in.size() < first + 2) return;
      const auto &a = in[first], &b = in[first + 1];
      if (a.size() == 3 && b.size() == 3) g_flops += 2.0 * a[0] * a[1] * a[2] * b[2];
      return;
    }
    case Op::kOther:
      return;
  }
}

}  // namespace

double count_forward_flops(torch::nn::AnyModule& model, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  // Evaluation mode: batch norm takes a batch of one (the FLOPs are the same).
  const bool training = model.ptr()->is_training();
  model.ptr()->eval();
  struct Restore {
    torch::nn::Module& module;
    bool training;
    ~Restore() { module.train(training); }
  } restore{*model.ptr(), training};
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
