#include "train/pretrained.h"

#include <fmt/format.h>
#include <torch/serialize.h>

#include <map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "models/weights.h"

namespace ddpx::train {
namespace {

// The name of the last Linear layer in registration order: the classifier head in every
// torchvision classifier (fc, classifier.6, classifier.3, heads.head, ...).
std::string head_prefix(torch::nn::Module& model) {
  std::string last;
  for (const auto& item : model.named_modules()) {
    if (item.value()->name() == "torch::nn::LinearImpl") last = item.key();
  }
  return last;
}

}  // namespace

std::string load_pretrained(const std::string& path, torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> tensors = models::read_state_dict(path);
  auto own = model.named_parameters();
  auto buffers = model.named_buffers();
  for (const auto& b : buffers) own.insert(b.key(), b.value());
  const std::string head = head_prefix(model);
  std::vector<std::string> kept;
  for (auto& [key, tensor] : tensors) {
    const torch::Tensor* mine = own.find(key);
    bool in_head = !head.empty() && key.rfind(head + ".", 0) == 0;
    if (mine != nullptr && in_head && mine->sizes() != tensor.sizes()) {
      tensor = mine->detach().clone();  // keep the fresh head
      kept.push_back(key);
    }
  }
  models::load_named_tensors(model, tensors);
  if (kept.empty())
    return fmt::format("loaded {} pretrained tensors from {}", tensors.size(), path);
  return fmt::format(
      "loaded {} pretrained tensors from {}; the classifier head '{}' has another "
      "number of classes there, so it was re-initialised",
      tensors.size() - kept.size(), path, head);
}

void export_state_dict(torch::nn::Module& model, const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& p : model.named_parameters()) dict.insert(p.key(), p.value().detach());
  for (const auto& b : model.named_buffers()) dict.insert(b.key(), b.value().detach());
  std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

}  // namespace ddpx::train
