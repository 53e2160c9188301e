// Name-based copy of tensors into modules, and reading torch.save files with libtorch's own
// zip reader and unpickler.
#include "models/weights.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <tuple>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

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
      message +=
          fmt::format(" {} unexpected key(s): {};", unexpected.size(), name_list(unexpected));
    }
    if (!mismatched.empty()) {
      message +=
          fmt::format(" {} shape mismatch(es): {};", mismatched.size(), name_list(mismatched));
    }
    message += " check that the weights were saved from the same architecture and num_classes";
    throw Error(ErrorKind::kData, message);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, source] : tensors) targets.at(name).copy_(source);
}

namespace {

// torch.save(model.state_dict()) pickles a collections.OrderedDict, which libtorch 1.13's
// unpickler turns into None (it expects OrderedDict only as a tensor's unused backward hooks),
// and it lacks the POP and SETITEM opcodes. Two edits make such a pickle loadable:
// - the opening  GLOBAL 'collections OrderedDict', BINPUT 0, EMPTY_TUPLE, REDUCE  becomes
//   EMPTY_DICT, MARK, GLOBAL ..., BINPUT 0, NONE, SETITEMS: a plain dict whose placeholder entry
//   {0: None} swallows the global's index (memo 0 still holds it for the tensors' hooks);
// - the closing BUILD that attaches `_metadata` (module versions we do not need) is cut off:
//   the pickle stops right before that state dict is built.
// Other pickles (a plain dict) are left untouched. Returns whether the placeholder was added.
constexpr char kOrderedDictGlobal[] = "ccollections\nOrderedDict\n";
constexpr char kMetadataKey[] = "X\x09\x00\x00\x00_metadata";

bool rewrite_ordered_dict(std::string& pickle) {
  const std::string global(kOrderedDictGlobal, sizeof(kOrderedDictGlobal) - 1);
  const std::string opening = std::string("\x80\x02", 2) + global + std::string("q\x00)R", 4);
  if (pickle.compare(0, opening.size(), opening) != 0) return false;
  const std::string metadata(kMetadataKey, sizeof(kMetadataKey) - 1);
  const size_t key = pickle.rfind(metadata);
  if (key != std::string::npos) {
    // The state dict opens with EMPTY_DICT then BINPUT n (2 bytes) or LONG_BINPUT n (5 bytes).
    size_t open = std::string::npos;
    if (key >= 3 && pickle[key - 3] == '}' && pickle[key - 2] == 'q') open = key - 3;
    if (key >= 6 && pickle[key - 6] == '}' && pickle[key - 5] == 'r') open = key - 6;
    if (open != std::string::npos) pickle = pickle.substr(0, open) + ".";
  }
  pickle = std::string("\x80\x02}(", 4) + global + std::string("q\x00Nu", 4) +
           pickle.substr(opening.size());
  return true;
}

}  // namespace

std::map<std::string, torch::Tensor> read_state_dict(const std::string& path) {
  DDPX_CHECK(std::ifstream(path, std::ios::binary).good(), ErrorKind::kIo,
             "cannot open weights file '{}'; check the path", path);
  torch::IValue value;
  bool placeholder = false;
  try {
    caffe2::serialize::PyTorchStreamReader archive(path);
    at::DataPtr data;
    size_t size = 0;
    std::tie(data, size) = archive.getRecord("data.pkl");
    std::string pickle(static_cast<const char*>(data.get()), size);
    placeholder = rewrite_ordered_dict(pickle);
    size_t offset = 0;
    auto reader = [&](char* buffer, size_t n) {
      n = std::min(n, pickle.size() - offset);
      std::memcpy(buffer, pickle.data() + offset, n);
      offset += n;
      return n;
    };
    auto read_record = [&](const std::string& key) {
      return std::get<0>(archive.getRecord("data/" + key));
    };
    torch::jit::Unpickler unpickler(reader, /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
                                    read_record, /*device=*/c10::nullopt);
    unpickler.set_version(archive.version());
    value = unpickler.parse_ivalue();
  } catch (const c10::Error& e) {
    fail(ErrorKind::kData,
         "cannot read weights file '{}': not a readable torch.save file ({}); save it from "
         "Python with torch.save(model.state_dict(), path) (torch >= 1.6 zip format)",
         path, e.what_without_backtrace());
  } catch (const std::exception& e) {  // e.g. std::out_of_range from a malformed pickle
    fail(ErrorKind::kData,
         "cannot read weights file '{}': malformed torch.save data ({}); re-save it from Python "
         "with torch.save(model.state_dict(), path)",
         path, e.what());
  }
  DDPX_CHECK(value.isGenericDict(), ErrorKind::kData,
             "weights file '{}' holds a {}, expected a dict of name -> tensor (a state_dict)", path,
             value.tagKind());
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    if (placeholder && entry.key().isInt() && entry.value().isNone()) continue;
    DDPX_CHECK(entry.key().isString() && entry.value().isTensor(), ErrorKind::kData,
               "weights file '{}' has an entry that is not name -> tensor ({} -> {}); expected "
               "a plain state_dict",
               path, entry.key().tagKind(), entry.value().tagKind());
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

}  // namespace ddpx::models
