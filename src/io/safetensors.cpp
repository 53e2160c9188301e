#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; ddpx reads it as the host's bytes");

namespace ddpx::io {
namespace {

constexpr size_t kMaxDims = 64;
constexpr int kMaxJsonDepth = 3;  // {name: {"shape": [..]}}

struct Dtype {
  const char* name;
  torch::ScalarType type;
  size_t size;
  int rank;  // the safetensors library's order: it writes higher ranks first, so all align
};

// The dtypes ddpx holds, in the safetensors library's enum order.
constexpr Dtype kDtypes[] = {
    {"BOOL", torch::kBool, 1, 0}, {"U8", torch::kByte, 1, 1},   {"I8", torch::kChar, 1, 2},
    {"I16", torch::kShort, 2, 3}, {"F16", torch::kHalf, 2, 4},  {"BF16", torch::kBFloat16, 2, 5},
    {"I32", torch::kInt, 4, 6},   {"F32", torch::kFloat, 4, 7}, {"F64", torch::kDouble, 8, 8},
    {"I64", torch::kLong, 8, 9},
};
// safetensors dtypes that exist but that ddpx does not read (no model of ddpx holds them).
constexpr const char* kOtherDtypes[] = {"F4",      "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3",
                                        "F8_E8M0", "U16",     "U32",     "U64",     "C64"};
constexpr const char* kHeld = "F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL";

const Dtype* dtype_named(const std::string& name) {
  for (const Dtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const Dtype* dtype_of(torch::ScalarType type) {
  for (const Dtype& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

template <typename... Args>
[[noreturn]] void bad(const std::string& source, fmt::format_string<Args...> what, Args&&... args) {
  fail(ErrorKind::kData,
       "{}: not a valid safetensors file: {}; it is damaged or was not written by a safetensors "
       "writer: save it again (safetensors.torch.save_file, or transformers' save_pretrained)",
       source, fmt::format(what, std::forward<Args>(args)...));
}

struct Entry {
  std::string name;
  const Dtype* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by offset, tiling the data buffer exactly
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + the header's length
};

uint64_t le64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

// One unsigned integer of the header, or a refusal naming where it is.
uint64_t unsigned_at(const nlohmann::json& value, const std::string& source,
                     const std::string& name, const char* field) {
  if (!value.is_number_unsigned())
    bad(source, "tensor '{}' has {} {}, expected non-negative integers", name, field, value.dump());
  return value.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const nlohmann::json& info, const std::string& source) {
  if (!info.is_object())
    bad(source, "tensor '{}' is described by {}, expected an object", name, info.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!info.contains(field)) bad(source, "tensor '{}' has no \"{}\"", name, field);
  Entry e;
  e.name = name;
  const auto& dtype = info.at("dtype");
  if (!dtype.is_string())
    bad(source, "tensor '{}' has dtype {}, expected a string", name, dtype.dump());
  const std::string dtype_name = dtype.get<std::string>();
  e.dtype = dtype_named(dtype_name);
  if (e.dtype == nullptr) {
    bool known = std::any_of(std::begin(kOtherDtypes), std::end(kOtherDtypes),
                             [&](const char* other) { return dtype_name == other; });
    if (known)
      fail(ErrorKind::kData,
           "{}: tensor '{}' has dtype {}, which ddpx does not read (it reads {}); convert the "
           "file's tensors to one of those in Python and save it again",
           source, name, dtype_name, kHeld);
    bad(source, "tensor '{}' has dtype \"{}\", which is no safetensors dtype (ddpx reads {})", name,
        dtype_name, kHeld);
  }
  const auto& shape = info.at("shape");
  if (!shape.is_array())
    bad(source, "tensor '{}' has shape {}, expected an array", name, shape.dump());
  if (shape.size() > kMaxDims)
    bad(source, "tensor '{}' has {} dimensions, more than {}", name, shape.size(), kMaxDims);
  // The product of the non-zero sizes bounds every stride libtorch computes: it must fit int64.
  uint64_t nonzero = 1;
  uint64_t numel = 1;
  for (const auto& dim : shape) {
    uint64_t d = unsigned_at(dim, source, name, "a shape of");
    if (d != 0 && (__builtin_mul_overflow(nonzero, d, &nonzero) ||
                   nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      bad(source, "tensor '{}' has shape {}, whose size overflows", name, shape.dump());
    numel *= d;  // at most `nonzero`, or 0
    e.shape.push_back(static_cast<int64_t>(d));
  }
  const auto& offsets = info.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    bad(source, "tensor '{}' has data_offsets {}, expected [begin, end]", name, offsets.dump());
  e.begin = unsigned_at(offsets[0], source, name, "data_offsets");
  e.end = unsigned_at(offsets[1], source, name, "data_offsets");
  if (e.begin > e.end)
    bad(source, "tensor '{}' has data_offsets [{}, {}]: it begins after it ends", name, e.begin,
        e.end);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, e.dtype->size, &bytes))
    bad(source, "tensor '{}' has shape {}, whose size overflows", name, shape.dump());
  if (bytes != e.end - e.begin)
    bad(source, "tensor '{}' is {} of shape {}, {} bytes, but its data_offsets [{}, {}] hold {}",
        name, dtype_name, shape.dump(), bytes, e.begin, e.end, e.end - e.begin);
  return e;
}

Header parse_header(const char* data, uint64_t size, const std::string& source) {
  if (size < 8) bad(source, "{} bytes, fewer than the 8 of the header's length", size);
  Header h;
  const uint64_t n = le64(data);
  if (n > kSafetensorsMaxHeader)
    bad(source, "the header claims {} bytes, over the {}-byte limit of the safetensors library", n,
        kSafetensorsMaxHeader);
  if (n > size - 8)
    bad(source, "the header claims {} bytes but the file has {} after the length", n, size - 8);
  h.data_start = 8 + n;
  nlohmann::json json;
  try {
    // The callback refuses nesting deeper than a header has before it is built.
    json = nlohmann::json::parse(
        data + 8, data + 8 + n, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxJsonDepth)
            bad(source, "the header nests deeper than {} levels", kMaxJsonDepth);
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    bad(source, "the header is not JSON ({})", e.what());
  }
  if (!json.is_object()) bad(source, "the header is {}, expected a JSON object", json.type_name());
  for (const auto& [name, info] : json.items()) {
    if (name == "__metadata__") {
      if (!info.is_object())
        bad(source, "\"__metadata__\" is {}, expected an object", info.type_name());
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string())
          bad(source, "\"__metadata__\" has \"{}\": {}, expected a string", key, value.dump());
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(name, info, source));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  const uint64_t buffer = size - h.data_start;
  uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : h.entries) {
    if (e.end > buffer)
      bad(source, "tensor '{}' has data_offsets [{}, {}] past the end of the data ({} bytes)",
          e.name, e.begin, e.end, buffer);
    if (e.begin < at)
      bad(source, "tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes {}..{})", e.name, e.begin,
          e.end, previous->name, previous->begin, previous->end);
    if (e.begin > at)
      bad(source, "bytes {}..{} of the data belong to no tensor (the next, '{}', begins at {})", at,
          e.begin, e.name, e.begin);
    at = e.end;
    previous = &e;
  }
  if (at != buffer)
    bad(source, "the data has {} bytes after its last tensor ends (at {} of {})", buffer - at, at,
        buffer);
  return h;
}

// The tensors of a validated header over `data`. With an `owner`, tensors whose address suits
// their element size view `data` and keep `owner` alive; the others (and all without one) copy.
std::map<std::string, torch::Tensor> make_tensors(const Header& h, const char* data,
                                                  const std::string& source,
                                                  const std::shared_ptr<void>& owner) {
  std::map<std::string, torch::Tensor> tensors;
  const auto cpu = torch::TensorOptions().device(torch::kCPU);
  for (const Entry& e : h.entries) {
    const char* at = data + h.data_start + e.begin;
    const size_t bytes = e.end - e.begin;
    if (e.dtype->type == torch::kBool) {
      // Any byte but 0 and 1 in a bool tensor is undefined behaviour in libtorch's kernels.
      const void* wrong = std::find_if(at, at + bytes, [](char c) { return c != 0 && c != 1; });
      if (wrong != at + bytes)
        bad(source, "BOOL tensor '{}' holds byte {} at element {}, expected 0 or 1", e.name,
            static_cast<int>(static_cast<uint8_t>(*static_cast<const char*>(wrong))),
            static_cast<const char*>(wrong) - at);
    }
    torch::Tensor t;
    const bool aligned = reinterpret_cast<uintptr_t>(at) % e.dtype->size == 0;
    if (owner && aligned && bytes > 0) {
      t = torch::from_blob(
          const_cast<char*>(at), e.shape, [owner](void*) {}, cpu.dtype(e.dtype->type));
    } else {
      t = torch::empty(e.shape, cpu.dtype(e.dtype->type));
      if (bytes > 0) std::memcpy(t.data_ptr(), at, bytes);
    }
    tensors.emplace(e.name, std::move(t));
  }
  return tensors;
}

// A private writable mapping of a file: writes to a tensor that views it stay in this process
// (copy-on-write) instead of faulting on a read-only page.
struct Mapping {
  void* addr = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, size);
  }
};

std::string json_string(const std::string& s, const char* what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    fail(ErrorKind::kUsage, "cannot write safetensors: the {} '{}' is not UTF-8", what, s);
  }
}

}  // namespace

Safetensors parse_safetensors(std::string_view bytes, const std::string& source) {
  Header h = parse_header(bytes.data(), bytes.size(), source);
  Safetensors out;
  out.tensors = make_tensors(h, bytes.data(), source, nullptr);
  out.metadata = std::move(h.metadata);
  return out;
}

Safetensors read_safetensors(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::kIo, "{} is not a readable regular file", path);
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  if (mapping->size >= 8)
    mapping->addr = ::mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (mapping->size < 8)
    bad(path, "{} bytes, fewer than the 8 of the header's length", mapping->size);
  DDPX_CHECK(mapping->addr != MAP_FAILED, ErrorKind::kIo, "cannot map {}: {}", path,
             std::strerror(err));
  const char* data = static_cast<const char*>(mapping->addr);
  Header h = parse_header(data, mapping->size, path);
  Safetensors out;
  out.tensors = make_tensors(h, data, path, mapping);
  out.metadata = std::move(h.metadata);
  return out;
}

std::string safetensors_bytes(const std::map<std::string, torch::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    torch::Tensor tensor;
    const Dtype* dtype;
  };
  std::vector<Item> items;
  for (const auto& [name, tensor] : tensors) {
    const Dtype* d = dtype_of(tensor.scalar_type());
    DDPX_CHECK(d != nullptr, ErrorKind::kUsage,
               "cannot write tensor '{}' as safetensors: its dtype {} is not one of {}", name,
               c10::toString(tensor.scalar_type()), kHeld);
    items.push_back({&name, tensor.detach().to(torch::kCPU).contiguous(), d});
  }
  // As the safetensors library: larger elements first, so every tensor is aligned; then by name.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.dtype->rank != b.dtype->rank) return a.dtype->rank > b.dtype->rank;
    return *a.name < *b.name;
  });
  // Written by hand, not as one nlohmann object: the library puts "__metadata__" first and the
  // tensors in the order above, and nlohmann would sort every key.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ",";
      first = false;
      header += json_string(key, "metadata key") + ":" + json_string(value, "metadata value");
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const Item& item : items) {
    if (header.size() > 1) header += ",";
    std::string shape;
    for (int64_t d : item.tensor.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const uint64_t bytes = item.tensor.numel() * item.dtype->size;
    header += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json_string(*item.name, "tensor name"), item.dtype->name, shape, offset,
                          offset + bytes);
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += header;
  for (const Item& item : items)
    if (item.tensor.numel() > 0)
      out.append(static_cast<const char*>(item.tensor.data_ptr()),
                 item.tensor.numel() * item.dtype->size);
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

}  // namespace ddpx::io
