#include "parallel/held_tensors.h"

#include <map>

namespace ddpx::parallel {

std::vector<HeldTensor> module_tensors(torch::nn::Module& module) {
  std::vector<HeldTensor> held;
  for (const auto& p : module.named_parameters()) held.push_back({p.key(), p.value()});
  for (const auto& b : module.named_buffers()) held.push_back({b.key(), b.value()});
  return held;
}

std::vector<HeldTensor> named_as_in(torch::nn::Module& module,
                                    const std::vector<torch::Tensor>& named,
                                    const std::vector<torch::Tensor>& tensors) {
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& t : module_tensors(module)) names[t.tensor.unsafeGetTensorImpl()] = t.name;
  std::vector<HeldTensor> held;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = names.find(named[i].unsafeGetTensorImpl());
    held.push_back({it == names.end() ? std::string("?") : it->second, tensors[i]});
  }
  return held;
}

}  // namespace ddpx::parallel
