// A small, bounds-checked reader for Python pickles (protocols 2 to 5), the one pickle machine
// of ddpx: it reads CIFAR's "python version" batches (dicts of numpy arrays and lists) and the
// data.pkl of torch.save'd state_dicts (io/torch_file.h; libtorch's unpickler never sees it). It
// never executes anything: a GLOBAL becomes a named reference, and REDUCE/NEWOBJ on an unknown
// callable becomes an opaque Object keeping its arguments. The few callables that build data (numpy
// arrays and dtypes, _codecs.encode for bytes under protocol 2, collections.OrderedDict) are
// interpreted; a persistent id (BINPERSID, torch's storages) is an Object of module "persistent_id"
// holding the id.
//
// Values live in an arena owned by the returned Pickle; pointers stay valid while it lives.
// Memo references may share (or even cycle) values, as in Python. Malformed input throws
// ddpx::Error(kData) naming the source and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddpx::io::pickle {

enum class Kind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kBytes,
  kStr,
  kList,
  kTuple,
  kDict,
  kNdarray,
  kGlobal,
  kObject
};
const char* kind_name(Kind kind);

struct Value;

// A numpy array: dtype as numpy's descriptor with an explicit byte order ("|u1", "<i8", "<f4").
struct NdArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes, C order unless fortran_order
  bool fortran_order = false;
  int64_t item_size() const;  // from the dtype's digits
  int64_t numel() const;
};

struct Value {
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                                // kBytes (raw), kStr (UTF-8)
  std::vector<Value*> items;                       // kList, kTuple
  std::vector<std::pair<Value*, Value*>> entries;  // kDict, in insertion order
  NdArray array;                                   // kNdarray
  std::string module, name;  // kGlobal, kObject: the callable's qualified name
  std::vector<Value*> args;  // kObject: the REDUCE/NEWOBJ arguments
  Value* state = nullptr;    // kObject: the BUILD state, if any

  bool is_string() const { return kind == Kind::kBytes || kind == Kind::kStr; }
  // Dict lookup by a str or bytes key equal to `key` (CIFAR uses b'data', Python 2 'data').
  const Value* find(std::string_view key) const;
};

struct Limits {
  int64_t max_values = 1 << 22;   // values created, guards memory on hostile input
  int64_t max_mark_depth = 1000;  // nested MARKs
  int64_t max_memo = 1 << 22;     // memo slots
  int64_t max_links = 1 << 23;    // slots in lists and dicts: BUILD can double a dict per opcode

  // For a pickle that goes on to a less careful unpickler (libtorch's reads torch.save's
  // data.pkl): only these opcodes (their bytes; empty: every one this parser reads) and these
  // globals ("module.name"; empty: any), and memo slots written in order (libtorch sizes its
  // memo table by the largest slot).
  std::string opcodes;
  std::set<std::string> globals;
  bool memo_in_order = false;
  // Ends every error: what the user should do about a bad file.
  std::string advice = "the file is corrupt or not a pickle; delete it and download it again";
};

class Pickle {
 public:
  const Value* root() const { return root_; }

 private:
  friend class Parser;
  std::vector<std::unique_ptr<Value>> arena_;
  Value* root_ = nullptr;
};

// Parses one pickle from memory; `source` names it in errors (usually the file path).
Pickle parse(std::string_view bytes, const std::string& source, const Limits& limits = {});
Pickle parse_file(const std::string& path, const Limits& limits = {});

}  // namespace ddpx::io::pickle
