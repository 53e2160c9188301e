// checkpoint(): a custom autograd function that recomputes its block in backward (see
// activation_checkpoint.h).
#include "models/activation_checkpoint.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include <mutex>

#include "core/error.h"

namespace ddpx::models {
namespace {

// What the first forward saw, for the recompute: the block, the random state, autocast.
struct Saved : torch::CustomClassHolder {
  BlockForward fn;
  std::vector<torch::Tensor> buffers;
  at::Tensor cpu_rng;
  at::Tensor cuda_rng;  // undefined unless the input is on a GPU
  c10::DeviceIndex cuda_device = 0;
  bool autocast_cpu = false, autocast_cuda = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16, autocast_cuda_dtype = at::kHalf;
};

// The default generator of `device` (a handle: set_state() on the copy sets the generator's).
at::Generator generator(const at::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

at::Tensor get_state(const at::Device& device) {
  at::Generator g = generator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_state(const at::Device& device, const at::Tensor& state) {
  at::Generator g = generator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

at::Device cuda(c10::DeviceIndex index) { return at::Device(at::kCUDA, index); }

// Puts the random state back after the recompute: the recompute must not move the stream the
// rest of training draws from.
class RngRestore {
 public:
  explicit RngRestore(const Saved& s) : s_(s) {
    cpu_ = get_state(at::kCPU);
    if (s.cuda_rng.defined()) cuda_ = get_state(cuda(s.cuda_device));
  }
  ~RngRestore() {
    set_state(at::kCPU, cpu_);
    if (cuda_.defined()) set_state(cuda(s_.cuda_device), cuda_);
  }

 private:
  const Saved& s_;
  at::Tensor cpu_, cuda_;
};

class Checkpoint : public torch::autograd::Function<Checkpoint> {
 public:
  // `anchor` requires grad, so the output does even when x does not (a first block's input):
  // the parameters inside still get their gradients.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor anchor, c10::intrusive_ptr<Saved> saved) {
    saved->cpu_rng = get_state(at::kCPU);
    if (x.is_cuda()) {
      saved->cuda_device = x.device().index();
      saved->cuda_rng = get_state(x.device());
    }
    saved->autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    saved->autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    saved->autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    saved->autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    ctx->saved_data["block"] = c10::IValue::make_capsule(saved);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;  // (Function::forward already runs without grad; said again)
    return saved->fn(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = c10::static_intrusive_pointer_cast<Saved>(ctx->saved_data["block"].toCapsule());
    torch::Tensor x = ctx->get_saved_variables()[0].detach();
    x.requires_grad_(x.is_floating_point());
    torch::Tensor y;
    std::vector<torch::Tensor> kept;  // the buffers as the first forward left them
    const bool cpu_on = at::autocast::is_autocast_enabled(at::kCPU);
    const bool cuda_on = at::autocast::is_autocast_enabled(at::kCUDA);
    const at::ScalarType cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    const at::ScalarType cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    {
      RngRestore restore(*saved);
      set_state(at::kCPU, saved->cpu_rng);
      if (saved->cuda_rng.defined()) set_state(cuda(saved->cuda_device), saved->cuda_rng);
      at::autocast::set_autocast_enabled(at::kCPU, saved->autocast_cpu);
      at::autocast::set_autocast_enabled(at::kCUDA, saved->autocast_cuda);
      at::autocast::set_autocast_dtype(at::kCPU, saved->autocast_cpu_dtype);
      at::autocast::set_autocast_dtype(at::kCUDA, saved->autocast_cuda_dtype);
      {
        torch::NoGradGuard no_grad;
        for (const auto& b : saved->buffers) kept.push_back(b.clone());
      }
      torch::AutoGradMode grad(true);
      y = saved->fn(x);
      at::autocast::set_autocast_enabled(at::kCPU, cpu_on);
      at::autocast::set_autocast_enabled(at::kCUDA, cuda_on);
      at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
      at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
    }
    if (y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    // After the backward: BatchNorm's backward reads the running statistics it saved.
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < kept.size(); ++i) saved->buffers[i].copy_(kept[i]);
    }
    return {x.is_floating_point() ? x.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const BlockForward& fn, const torch::Tensor& x,
                         const std::vector<torch::Tensor>& buffers) {
  if (!torch::GradMode::is_enabled()) return fn(x);  // evaluation: nothing to keep anyway
  auto saved = c10::make_intrusive<Saved>();
  saved->fn = fn;
  saved->buffers = buffers;
  torch::Tensor anchor = torch::zeros({}, torch::requires_grad());
  return Checkpoint::apply(x, anchor, saved);
}

namespace {

// The whole number after `prefix` in `text`, or 0 when there is none.
int count_after(const std::string& text, size_t prefix) {
  const std::string k = text.substr(prefix);
  try {
    size_t used = 0;
    const int n = std::stoi(k, &used);
    return used == k.size() ? n : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

ActivationCheckpointing parse_activation_checkpointing(const std::string& text) {
  if (text == "none") return {0, 0};
  if (text == "blocks") return {1, 0};
  if (text.rfind("every:", 0) == 0) {
    const int every = count_after(text, 6);
    DDPX_CHECK(every >= 1, ErrorKind::kUsage,
               "--activation_checkpointing {}: K in every:K must be a whole number >= 1 (every:2 "
               "recomputes every second block)",
               text);
    return {every, 0};
  }
  if (text.rfind("blocks:", 0) == 0) {
    const int first = count_after(text, 7);
    DDPX_CHECK(first >= 1, ErrorKind::kUsage,
               "--activation_checkpointing {}: N in blocks:N must be a whole number >= 1 "
               "(blocks:8 recomputes the first 8 blocks)",
               text);
    return {1, first};
  }
  throw Error(
      ErrorKind::kUsage,
      fmt::format("--activation_checkpointing {}: expected none, blocks, blocks:N or every:K",
                  text));
}

std::string name(const ActivationCheckpointing& policy) {
  if (policy.every == 0) return "none";
  if (policy.first > 0) return "blocks:" + std::to_string(policy.first);
  if (policy.every == 1) return "blocks";
  return "every:" + std::to_string(policy.every);
}

bool checkpoints_layer(const ActivationCheckpointing& policy, size_t index, size_t count) {
  if (policy.every == 0 || index == 0 || index + 1 >= count) return false;
  if (policy.first > 0 && index > static_cast<size_t>(policy.first)) return false;
  return (index - 1) % static_cast<size_t>(policy.every) == 0;
}

}  // namespace ddpx::models
