#include "train/pretrained.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>

#include <filesystem>
#include <map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "models/gpt.h"
#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
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
  // A folder is a Hugging Face model as save_pretrained writes it: GPT-2 for ddpx's GPT,
  // BertForMaskedLM for its BERT.
  if (std::filesystem::is_directory(path)) {
    if (auto* bert = dynamic_cast<models::BertImpl*>(&model))
      return models::load_hf_bert(path, *bert, "chosen by --model");
    auto* gpt = dynamic_cast<models::GptImpl*>(&model);
    DDPX_CHECK(gpt != nullptr, ErrorKind::kUsage,
               "--pretrained {} is a folder, which ddpx reads as a Hugging Face GPT-2 "
               "or BERT (config.json, model.safetensors); this --model is neither: give it a "
               "torch.save'd state_dict file",
               path);
    return models::load_hf_gpt2(path, *gpt, "chosen by --model");
  }
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
  // Host tensors: torch.load restores each tensor to the device recorded here, and a file that
  // names cuda:0 fails on a host without a GPU unless the reader passes map_location.
  for (const auto& p : model.named_parameters()) dict.insert(p.key(), p.value().detach().cpu());
  for (const auto& b : model.named_buffers()) dict.insert(b.key(), b.value().detach().cpu());
  // torch::pickle_save's archive, but with the dict untagged: PyTorch >= 2.6 loads with
  // weights_only=True by default, which refuses the torch.jit type tag the default Pickler adds.
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* buf, size_t size) { pickle.insert(pickle.end(), buf, buf + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  write_file_atomic(path, bytes);
}

}  // namespace ddpx::train
