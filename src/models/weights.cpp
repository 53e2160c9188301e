// Name-based copy of tensors into modules, and reading torch.save files via the JIT unpickler.
#include "models/weights.h"

#include <fstream>
#include <iterator>
#include <vector>

#include <torch/serialize.h>

#include "core/error.h"

namespace ddpx::models {
namespace {

// At most this many names in one error message; the count says how many more there were.
constexpr size_t kMaxNamesInError = 8;

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesInError; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (names.size() > kMaxNamesInError) {
    out += fmt::format(" (and {} more)", names.size() - kMaxNamesInError);
  }
  return out;
}

std::string shape_string(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

}  // namespace

void load_named_tensors(torch::nn::Module& module,
                        const std::map<std::string, torch::Tensor>& tensors) {
  std::map<std::string, torch::Tensor> targets;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    targets[item.key()] = item.value();
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    targets[item.key()] = item.value();
  }
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : targets) {
    if (tensors.count(name) == 0) missing.push_back(name);
  }
  for (const auto& [name, source] : tensors) {
    auto it = targets.find(name);
    if (it == targets.end()) {
      unexpected.push_back(name);
    } else if (!source.defined() || source.sizes() != it->second.sizes()) {
      mismatched.push_back(fmt::format("{} (file {}, model {})", name,
                                       source.defined() ? shape_string(source) : "undefined",
                                       shape_string(it->second)));
    }
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string message = fmt::format("weights do not match the {} model:", module.name());
    if (!missing.empty()) {
      message += fmt::format(" {} missing key(s): {};", missing.size(), name_list(missing));
    }
    if (!unexpected.empty()) {
      message += fmt::format(" {} unexpected key(s): {};", unexpected.size(), name_list(unexpected));
    }
    if (!mismatched.empty()) {
      message += fmt::format(" {} shape mismatch(es): {};", mismatched.size(), name_list(mismatched));
    }
    message += " check that the weights were saved from the same architecture and num_classes";
    throw Error(ErrorKind::kData, message);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, source] : tensors) targets.at(name).copy_(source);
}

std::map<std::string, torch::Tensor> read_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kIo, "cannot open weights file '{}'; check the path", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  torch::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    fail(ErrorKind::kData,
         "cannot read weights file '{}' ({} bytes): not a torch.save file ({}); save it from "
         "Python with torch.save(model.state_dict(), path)",
         path, bytes.size(), e.what_without_backtrace());
  }
  DDPX_CHECK(value.isGenericDict(), ErrorKind::kData,
             "weights file '{}' holds a {}, expected a dict of name -> tensor (a state_dict)", path,
             value.tagKind());
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    DDPX_CHECK(entry.key().isString() && entry.value().isTensor(), ErrorKind::kData,
               "weights file '{}' has an entry that is not name -> tensor ({} -> {}); expected "
               "a plain state_dict",
               path, entry.key().tagKind(), entry.value().tagKind());
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

}  // namespace ddpx::models
