// Name-based copy of tensors into modules, and reading torch.save files through ddpx's own zip
// and pickle readers (io/torch_file.h, io/pickle.h), which describe each tensor; the tensors are
// made here from the archive's records.
#include "models/weights.h"

#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
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

// The dtype of each plain storage type torch.save names (io/torch_file.h lets no other through).
torch::ScalarType storage_dtype(const std::string& type, const std::string& path) {
  static const std::map<std::string, torch::ScalarType> kDtypes = {
      {"FloatStorage", torch::kFloat32}, {"DoubleStorage", torch::kFloat64},
      {"HalfStorage", torch::kFloat16},  {"BFloat16Storage", torch::kBFloat16},
      {"LongStorage", torch::kInt64},    {"IntStorage", torch::kInt32},
      {"ShortStorage", torch::kInt16},   {"CharStorage", torch::kInt8},
      {"ByteStorage", torch::kUInt8},    {"BoolStorage", torch::kBool}};
  auto it = kDtypes.find(type);
  DDPX_CHECK(it != kDtypes.end(), ErrorKind::kData,
             "weights file '{}' holds a torch.{}, which ddpx does not read; save plain tensors "
             "with torch.save(model.state_dict(), path)",
             path, type);
  return it->second;
}

// A tensor must lie inside its storage and the storage inside its record: sizes, strides, the
// offset and the storage's element count all come from the file.
void check_extent(const io::PickledTensor& t, int64_t item_size, size_t record_bytes,
                  const std::string& path, const std::string& name) {
  auto bad = [&](const char* what) {
    fail(ErrorKind::kData, "weights file '{}': tensor '{}' {}; the file is corrupt, save it again",
         path, name, what);
  };
  if (t.storage_numel < 0 ||
      static_cast<unsigned __int128>(t.storage_numel) * item_size > record_bytes)
    bad("claims more storage than its record holds");
  if (t.offset < 0) bad("has a negative offset");
  // The last element's index, with overflow checks.
  uint64_t last = static_cast<uint64_t>(t.offset);
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    const int64_t size = t.sizes[d], stride = t.strides[d];
    if (size < 0 || stride < 0) bad("has a negative size or stride");
    if (size == 0) return;  // no elements, nothing is read
    unsigned __int128 reach =
        static_cast<unsigned __int128>(size - 1) * static_cast<uint64_t>(stride) + last;
    if (reach >= (uint64_t(1) << 56)) bad("is too large");
    last = static_cast<uint64_t>(reach);
  }
  if (last >= static_cast<uint64_t>(t.storage_numel)) bad("reaches past the end of its storage");
}

// Reads the dict from the bytes of a torch.save file; `path` labels errors. The zip and the
// pickle are read by ddpx's own readers (io/torch_file.h); each storage becomes one host tensor
// that the state_dict's tensors view, as torch.load shares them.
std::map<std::string, torch::Tensor> read_state_dict_from(std::string_view bytes,
                                                          const std::string& path) {
  const std::string hint =
      "save it from Python with torch.save(model.state_dict(), path) (torch >= 1.6)";
  io::TorchZip zip = io::read_torch_zip(bytes, path, hint);
  auto data_pkl = zip.records.find("data.pkl");
  DDPX_CHECK(data_pkl != zip.records.end(), ErrorKind::kData,
             "weights file '{}' has a compressed data.pkl; {}", path, hint);
  std::map<std::string, torch::Tensor> storages;  // by key: flat, of the storage's dtype
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : io::read_state_dict_pickle(data_pkl->second, path)) {
    const torch::ScalarType dtype = storage_dtype(t.storage_type, path);
    auto record = zip.records.find("data/" + t.storage_key);
    DDPX_CHECK(record != zip.records.end(), ErrorKind::kData,
               "weights file '{}' lacks the record data/{} that its data.pkl names; the file "
               "is incomplete, save it again",
               path, t.storage_key);
    check_extent(t, static_cast<int64_t>(c10::elementSize(dtype)), record->second.size(), path,
                 name);
    torch::Tensor& storage = storages[t.storage_key];
    if (!storage.defined()) {
      storage = torch::empty({t.storage_numel}, torch::TensorOptions().dtype(dtype));
      if (storage.nbytes() > 0)
        std::memcpy(storage.data_ptr(), record->second.data(), storage.nbytes());
    }
    DDPX_CHECK(storage.scalar_type() == dtype && storage.numel() == t.storage_numel,
               ErrorKind::kData,
               "weights file '{}': tensor '{}' reads storage {} as another type or size than "
               "the tensors before it; the file is corrupt, save it again",
               path, name, t.storage_key);
    DDPX_CHECK(out.count(name) == 0, ErrorKind::kData,
               "weights file '{}' names tensor '{}' twice; the file is corrupt, save it again",
               path, name);
    try {
      out[name] = storage.as_strided(t.sizes, t.strides, t.offset);
    } catch (const c10::Error& e) {  // an empty tensor's offset past its storage, say
      fail(ErrorKind::kData,
           "weights file '{}': tensor '{}' does not fit its storage ({}); the "
           "file is corrupt, save it again",
           path, name, e.what_without_backtrace());
    }
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
