#include "io/torch_file.h"

#include <caffe2/serialize/versions.h>

#include "core/error.h"
#include "io/pickle.h"

namespace ddpx::io {
namespace {

constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kCentralEntry = 0x02014b50;
constexpr uint32_t kLocalEntry = 0x04034b50;
constexpr size_t kEndBytes = 22, kCentralBytes = 46, kLocalBytes = 30;
constexpr size_t kMaxComment = 0xffff;
constexpr uint64_t kDeflate = 8;
constexpr uint32_t kZip64Locator = 0x07064b50, kZip64End = 0x06064b50;
constexpr size_t kLocatorBytes = 20, kZip64EndBytes = 56;
constexpr uint64_t kZip64Extra = 0x0001;
// General-purpose flags libtorch's miniz refuses when it reads a record (encrypted, patched,
// strongly encrypted, masked directory): its zip reader then leaks. torch.save sets 0x808.
constexpr uint64_t kUnreadableFlags = 0x0001 | 0x0020 | 0x0040 | 0x2000;

// The storage types of plain tensors. Quantized ones (QInt8Storage, ...) are left out: libtorch
// rebuilds them without a quantizer, and the first operation on one fails an internal assert.
constexpr const char* kStorages[] = {
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
    "IntStorage",   "ShortStorage",  "CharStorage", "ByteStorage",     "BoolStorage"};

uint64_t le(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[at + i])) << (8 * i);
  return v;
}

}  // namespace

TorchZip read_torch_zip(std::string_view bytes, const std::string& path, const std::string& hint) {
  auto bad = [&](const char* what) {
    fail(ErrorKind::kData, "'{}' is not a torch zip archive ({}); {}", path, what, hint);
  };
  if (bytes.size() < kEndBytes) bad("too short");
  size_t end = std::string::npos;
  const size_t lowest =
      bytes.size() - kEndBytes > kMaxComment ? bytes.size() - kEndBytes - kMaxComment : 0;
  for (size_t at = bytes.size() - kEndBytes + 1; at-- > lowest;) {
    if (le(bytes, at, 4) == kEndOfCentralDirectory &&
        at + kEndBytes + le(bytes, at + 20, 2) == bytes.size()) {
      end = at;
      break;
    }
  }
  if (end == std::string::npos) bad("no end of central directory");
  uint64_t entries = le(bytes, end + 10, 2);
  uint64_t directory_size = le(bytes, end + 12, 4);
  uint64_t directory = le(bytes, end + 16, 4);
  // Files past 4 GB (big checkpoints) keep these in the zip64 end record, found through the
  // locator right before the end record; torch writes both always.
  uint64_t limit = end;
  if (end >= kLocatorBytes && le(bytes, end - kLocatorBytes, 4) == kZip64Locator) {
    const uint64_t record = le(bytes, end - kLocatorBytes + 8, 8);
    if (record > end - kLocatorBytes || end - kLocatorBytes - record < kZip64EndBytes ||
        le(bytes, record, 4) != kZip64End) {
      bad("bad zip64 end record");
    }
    if (entries == 0xffff || directory_size == 0xffffffff || directory == 0xffffffff) {
      entries = le(bytes, record + 32, 8);
      directory_size = le(bytes, record + 40, 8);
      directory = le(bytes, record + 48, 8);
    }
    limit = record;
  }
  if (directory > limit || directory_size > limit - directory)
    bad("central directory out of range");

  TorchZip zip;
  std::string folder;
  size_t at = directory;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at + kCentralBytes > directory + directory_size) bad("central directory truncated");
    if (le(bytes, at, 4) != kCentralEntry) bad("bad central directory entry");
    if (le(bytes, at + 8, 2) & kUnreadableFlags) bad("encrypted or patched record");
    const uint64_t method = le(bytes, at + 10, 2);
    uint64_t packed = le(bytes, at + 20, 4), size = le(bytes, at + 24, 4);
    const uint64_t name_len = le(bytes, at + 28, 2), extra_len = le(bytes, at + 30, 2),
                   comment_len = le(bytes, at + 32, 2);
    uint64_t local = le(bytes, at + 42, 4);
    const size_t next = at + kCentralBytes + name_len + extra_len + comment_len;
    if (next > directory + directory_size) bad("central directory truncated");
    // Saturated fields continue in the zip64 extra field (id 1), in this order.
    if (size == 0xffffffff || packed == 0xffffffff || local == 0xffffffff) {
      std::string_view extra = bytes.substr(at + kCentralBytes + name_len, extra_len);
      size_t field = 0;
      while (field + 4 <= extra.size() && le(extra, field, 2) != kZip64Extra) {
        field += 4 + le(extra, field + 2, 2);
      }
      if (field + 4 > extra.size()) bad("no zip64 extra field");
      std::string_view values = extra.substr(field + 4, le(extra, field + 2, 2));
      size_t v = 0;
      for (uint64_t* value : {&size, &packed, &local}) {
        if (*value != 0xffffffff) continue;
        if (v + 8 > values.size()) bad("short zip64 extra field");
        *value = le(values, v, 8);
        v += 8;
      }
    }
    std::string name(bytes.substr(at + kCentralBytes, name_len));
    if (!(method == 0 && packed == size) && method != kDeflate) bad("unsupported record method");
    if (local > directory || directory - local < kLocalBytes ||
        le(bytes, local, 4) != kLocalEntry) {
      bad("bad local header");
    }
    const uint64_t data = local + kLocalBytes + le(bytes, local + 26, 2) + le(bytes, local + 28, 2);
    if (data > directory || packed > directory - data) bad("record out of range");
    // torch.save puts every record in one folder named after the file: "archive/data.pkl".
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0) bad("record outside the archive folder");
    if (folder.empty()) folder = name.substr(0, slash);
    if (name.compare(0, slash, folder) != 0) bad("records in more than one folder");
    std::string key = name.substr(slash + 1);
    const bool fresh = method == kDeflate
                           ? zip.compressed.insert(key).second
                           : zip.records.emplace(key, bytes.substr(data, size)).second;
    if (!fresh || zip.records.count(key) + zip.compressed.count(key) > 1) bad("duplicate record");
    at = next;
  }
  auto version = zip.records.find("version");
  if (version == zip.records.end()) version = zip.records.find(".data/version");
  if (version == zip.records.end()) bad("no stored version record");
  if (zip.records.count("data.pkl") + zip.compressed.count("data.pkl") == 0) bad("no data.pkl");
  std::string digits(version->second);
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == '\r')) digits.pop_back();
  if (digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    bad("unreadable version record");
  }
  zip.version = std::stoull(digits);
  if (zip.version < caffe2::serialize::kMinSupportedFileFormatVersion ||
      zip.version > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    bad("a format version this libtorch does not read");
  }
  return zip;
}

namespace {

// What torch._utils._rebuild_tensor_v2's arguments say, checked for their kinds.
PickledTensor rebuilt_tensor(const pickle::Value* v, const std::string& path,
                             const std::string& name) {
  using pickle::Kind;
  auto bad = [&](const char* what) {
    fail(ErrorKind::kData,
         "weights file '{}': entry '{}' is not a tensor as torch.save writes one ({}); save it "
         "with torch.save(model.state_dict(), path)",
         path, name, what);
  };
  auto ints = [&](const pickle::Value* tuple, const char* what) {
    if (tuple->kind != Kind::kTuple) bad(what);
    std::vector<int64_t> out;
    for (const pickle::Value* d : tuple->items) {
      if (d->kind != Kind::kInt) bad(what);
      out.push_back(d->integer);
    }
    return out;
  };
  // A Parameter: _rebuild_parameter(tensor, requires_grad, hooks).
  if (v->kind == Kind::kObject && v->module == "torch._utils" && v->name == "_rebuild_parameter") {
    if (v->args.empty()) bad("a parameter without its tensor");
    v = v->args[0];
  }
  if (v->kind != Kind::kObject || v->module != "torch._utils" || v->name != "_rebuild_tensor_v2")
    bad(v->kind == Kind::kObject ? "another kind of object" : pickle::kind_name(v->kind));
  const auto& a = v->args;
  if (a.size() < 4) bad("too few arguments");
  // The storage: a persistent id ('storage', storage type, key, location, numel).
  const pickle::Value* id = a[0];
  if (id->kind != Kind::kObject || id->module != "persistent_id" || id->args.size() != 1 ||
      id->args[0]->kind != Kind::kTuple)
    bad("its storage is not a persistent id");
  const auto& s = id->args[0]->items;
  if (s.size() != 5 || !s[0]->is_string() || s[0]->text != "storage" ||
      s[1]->kind != Kind::kGlobal || s[1]->module != "torch" || !s[2]->is_string() ||
      s[4]->kind != Kind::kInt)
    bad("its storage id is not ('storage', type, key, location, size)");
  PickledTensor t;
  t.storage_type = s[1]->name;
  t.storage_key = s[2]->text;
  t.storage_numel = s[4]->integer;
  if (a[1]->kind != Kind::kInt) bad("its offset is not an int");
  t.offset = a[1]->integer;
  t.sizes = ints(a[2], "its sizes are not a tuple of ints");
  t.strides = ints(a[3], "its strides are not a tuple of ints");
  if (t.sizes.size() != t.strides.size()) bad("its sizes and strides differ in length");
  return t;
}

}  // namespace

std::vector<std::pair<std::string, PickledTensor>> read_state_dict_pickle(std::string_view bytes,
                                                                          const std::string& path) {
  pickle::Limits limits;
  // The opcodes torch.save's protocol 2 writes for a state_dict, and no others.
  limits.opcodes = std::string(
      "\x80"
      "cqrhj)}]N\x88\x89KMJG\x8aX(t\x85\x86\x87RbsaQue.");
  limits.globals = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                    "torch._utils._rebuild_parameter"};
  for (const char* storage : kStorages) limits.globals.insert(std::string("torch.") + storage);
  limits.memo_in_order = true;
  // A state_dict's pickle is a few values per tensor; these bound a hostile one's memory.
  limits.max_values = 1 << 20;
  limits.max_memo = 1 << 20;
  limits.max_links = 1 << 21;
  limits.advice = "save it with torch.save(model.state_dict(), path)";
  const pickle::Pickle parsed =
      pickle::parse(bytes, fmt::format("weights file '{}', data.pkl", path), limits);
  const pickle::Value* root = parsed.root();
  DDPX_CHECK(root->kind == pickle::Kind::kDict, ErrorKind::kData,
             "weights file '{}' holds a {}, expected a dict of name -> tensor (a state_dict); "
             "save it with torch.save(model.state_dict(), path)",
             path, pickle::kind_name(root->kind));
  std::vector<std::pair<std::string, PickledTensor>> out;
  for (const auto& [key, value] : root->entries) {
    DDPX_CHECK(key->kind == pickle::Kind::kStr, ErrorKind::kData,
               "weights file '{}' has a key that is not a name ({}); expected a plain state_dict",
               path, pickle::kind_name(key->kind));
    // state_dict()'s OrderedDict is BUILT with {'_metadata': module versions}, which io/pickle
    // adds as an entry; a tensor is never a dict, and ddpx needs no versions.
    if (key->text == "_metadata" && value->kind == pickle::Kind::kDict) continue;
    out.emplace_back(key->text, rebuilt_tensor(value, path, key->text));
  }
  return out;
}

}  // namespace ddpx::io
