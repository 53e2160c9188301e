// Name-based copy of tensors into modules, and reading torch.save files: ddpx's own zip reader
// and pickle check (io/torch_file.h, io/pickle.h) in front of libtorch's unpickler.
#include "models/weights.h"

#include <c10/core/CPUAllocator.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/torch_file.h"

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

// torch.save(model.state_dict()) pickles a collections.OrderedDict, which libtorch's
// unpickler turned into None on 1.13, where this was written (it expects OrderedDict only as a
// tensor's unused backward hooks), and 1.13's lacked the POP and SETITEM opcodes. Two edits make
// such a pickle loadable:
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

// The records of the unpickled storages: where libtorch's storage memory starts, and how many
// bytes the file really had for it (libtorch sizes a storage by the count in the pickle).
using RecordSizes = std::map<const void*, size_t>;

// A tensor must lie inside its storage and the storage inside its record: libtorch (1.13,
// where this was found) sets sizes, strides and offset from the pickle unchecked, so reading a bad
// one reads past memory.
void check_extent(const torch::Tensor& t, const RecordSizes& records, const std::string& path,
                  const std::string& name) {
  auto bad = [&](const char* what) {
    fail(ErrorKind::kData, "weights file '{}': tensor '{}' {}; the file is corrupt, save it again",
         path, name, what);
  };
  const c10::Storage& storage = t.storage();
  const auto record = records.find(storage.data());
  const size_t have = record == records.end() ? 0 : record->second;
  if (storage.nbytes() > have) bad("claims more storage than its record holds");
  if (t.storage_offset() < 0) bad("has a negative offset");
  // The last element's index, with overflow checks (sizes and strides are untrusted).
  uint64_t last = static_cast<uint64_t>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.sizes()[d], stride = t.strides()[d];
    if (size < 0 || stride < 0) bad("has a negative size or stride");
    if (size == 0) return;  // no elements, nothing is read
    unsigned __int128 reach =
        static_cast<unsigned __int128>(size - 1) * static_cast<uint64_t>(stride) + last;
    if (reach >= (uint64_t(1) << 56)) bad("is too large");
    last = static_cast<uint64_t>(reach);
  }
  if ((last + 1) * t.dtype().itemsize() > storage.nbytes()) {
    bad("reaches past the end of its storage");
  }
}

// Reads the dict from the bytes of a torch.save file; `path` labels errors. The zip and the
// pickle pass ddpx's own checks (io/torch_file.h) before libtorch's unpickler sees them.
std::map<std::string, torch::Tensor> read_state_dict_from(std::string_view bytes,
                                                          const std::string& path) {
  const std::string hint =
      "save it from Python with torch.save(model.state_dict(), path) (torch >= 1.6)";
  io::TorchZip zip = io::read_torch_zip(bytes, path, hint);
  auto data_pkl = zip.records.find("data.pkl");
  DDPX_CHECK(data_pkl != zip.records.end(), ErrorKind::kData,
             "weights file '{}' has a compressed data.pkl; {}", path, hint);
  std::string pickle(data_pkl->second);
  const bool placeholder = rewrite_ordered_dict(pickle);
  io::check_state_dict_pickle(pickle, path);
  RecordSizes record_sizes;
  torch::IValue value;
  try {
    size_t offset = 0;
    auto reader = [&](char* buffer, size_t n) {
      n = std::min(n, pickle.size() - offset);
      std::memcpy(buffer, pickle.data() + offset, n);
      offset += n;
      return n;
    };
    auto read_record = [&](const std::string& key) {
      auto it = zip.records.find("data/" + key);
      DDPX_CHECK(it != zip.records.end(), ErrorKind::kData,
                 "weights file '{}' lacks the record data/{} that its data.pkl names; the file "
                 "is incomplete, save it again",
                 path, key);
      at::DataPtr data = c10::GetCPUAllocator()->allocate(it->second.size());
      if (!it->second.empty()) std::memcpy(data.get(), it->second.data(), it->second.size());
      record_sizes[data.get()] = it->second.size();
      return data;
    };
    // Storages go to the CPU whatever device they were saved from.
    torch::jit::Unpickler unpickler(reader, /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
                                    read_record, /*device=*/c10::Device(c10::kCPU));
    unpickler.set_version(zip.version);
    value = unpickler.parse_ivalue();
  } catch (const Error&) {
    throw;
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
    check_extent(entry.value().toTensor(), record_sizes, path, entry.key().toStringRef());
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

}  // namespace

std::map<std::string, torch::Tensor> read_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kIo, "cannot open weights file '{}'; check the path", path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DDPX_CHECK(!in.bad(), ErrorKind::kIo, "cannot read weights file '{}'; check the file", path);
  return read_state_dict_from(bytes, path);
}

std::map<std::string, torch::Tensor> read_state_dict_bytes(const std::string& bytes,
                                                           const std::string& path) {
  return read_state_dict_from(bytes, path);
}

}  // namespace ddpx::models
