// The pickle virtual machine, restricted to data: see pickle.h for what is interpreted.
#include "data/pickle.h"

#include <cstring>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ddpx::data::pickle {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kBytes: return "bytes";
    case Kind::kStr: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNdarray: return "ndarray";
    case Kind::kGlobal: return "global";
    case Kind::kObject: return "object";
  }
  return "?";
}

int64_t NdArray::item_size() const {
  int64_t size = 0;
  for (char c : dtype) {
    if (c >= '0' && c <= '9') size = size * 10 + (c - '0');
    if (size > 64) return 0;
  }
  return size;
}

int64_t NdArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  // The last assignment wins, as in a Python dict built by SETITEM.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->is_string() && it->first->text == key) return it->second;
  }
  return nullptr;
}

class Parser {
 public:
  Parser(std::string_view bytes, const std::string& source, const Limits& limits)
      : in_(bytes), source_(source), limits_(limits) {}

  Pickle run();

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorKind::kData, "{}: malformed pickle at byte {}: {} (the file is corrupt or not a "
         "pickle; delete it and download it again)", source_, op_pos_, what);
  }
  void need(uint64_t n) const {
    if (n > in_.size() - pos_) bad(fmt::format("needs {} more bytes, {} left", n, in_.size() - pos_));
  }
  uint8_t u8() { need(1); return static_cast<uint8_t>(in_[pos_++]); }
  uint64_t uint_le(int n) {
    need(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in_[pos_ + i]);
    pos_ += n;
    return v;
  }
  std::string take(uint64_t n) {
    need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string line() {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) bad("a text argument has no newline");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  Value* make(Kind kind) {
    if (static_cast<int64_t>(out_.arena_.size()) >= limits_.max_values)
      bad(fmt::format("more than {} values", limits_.max_values));
    out_.arena_.push_back(std::make_unique<Value>());
    out_.arena_.back()->kind = kind;
    return out_.arena_.back().get();
  }
  Value* make_string(Kind kind, std::string text) {
    Value* v = make(kind);
    v->text = std::move(text);
    return v;
  }
  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.size() <= mark_floor()) bad("pop from an empty stack");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= mark_floor()) bad("the stack is empty");
    return stack_.back();
  }
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) bad("no MARK on the stack");
    size_t at = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + at, stack_.end());
    stack_.resize(at);
    return items;
  }
  Value* expect(Value* v, Kind kind, const char* what) {
    if (v->kind != kind) bad(fmt::format("{} must be a {}, got {}", what, kind_name(kind),
                                         kind_name(v->kind)));
    return v;
  }
  void memo_put(uint64_t index) {
    if (static_cast<int64_t>(memo_.size()) >= limits_.max_memo && !memo_.count(index))
      bad(fmt::format("more than {} memo entries", limits_.max_memo));
    memo_[index] = top();
  }
  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) bad(fmt::format("memo entry {} was never stored", index));
    return it->second;
  }
  void set_item(Value* dict, Value* key, Value* value) {
    expect(dict, Kind::kDict, "the target of SETITEM");
    dict->entries.emplace_back(key, value);
  }
  void append(Value* list, Value* item) {
    if (list->kind != Kind::kList) bad(fmt::format("APPEND to a {}", kind_name(list->kind)));
    list->items.push_back(item);
  }
  Value* make_global(std::string module, std::string name) {
    Value* v = make(Kind::kGlobal);
    v->module = std::move(module);
    v->name = std::move(name);
    return v;
  }
  Value* reduce(Value* callable, Value* args);
  void build(Value* obj, Value* state);
  std::string dtype_of(const Value* dtype);
  void check_array(NdArray& array);
  std::vector<int64_t> shape_of(const Value* v);
  std::string latin1(const std::string& utf8);

  std::string_view in_;
  const std::string& source_;
  Limits limits_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
  Pickle out_;
};

// Python 3 pickles bytes under protocol 2 as _codecs.encode(str, 'latin1'): undo the UTF-8.
std::string Parser::latin1(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    auto c = static_cast<uint8_t>(utf8[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c & 0xE0) == 0xC0 && i + 1 < utf8.size() && c <= 0xC3) {
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(utf8[++i]) & 0x3F)));
    } else {
      bad("_codecs.encode argument is not latin-1 text");
    }
  }
  return out;
}

std::vector<int64_t> Parser::shape_of(const Value* v) {
  if (v->kind != Kind::kTuple && v->kind != Kind::kList) bad("an array shape must be a tuple");
  std::vector<int64_t> shape;
  for (const Value* d : v->items) {
    if (d->kind != Kind::kInt || d->integer < 0) bad("an array dimension must be an int >= 0");
    shape.push_back(d->integer);
  }
  if (shape.size() > 32) bad("an array has more than 32 dimensions");
  return shape;
}

// numpy.dtype('u1', False, True) + BUILD (3, '<', ...): the descriptor with its byte order.
std::string Parser::dtype_of(const Value* dtype) {
  if (dtype->kind != Kind::kObject || dtype->name != "dtype" || dtype->args.empty() ||
      !dtype->args[0]->is_string())
    bad("an array's dtype is not a numpy.dtype");
  std::string descr = dtype->args[0]->text;
  if (descr.empty() || descr.size() > 8) bad("an empty or overlong dtype descriptor");
  char order = 0;
  if (dtype->state && dtype->state->kind == Kind::kTuple && dtype->state->items.size() > 1 &&
      dtype->state->items[1]->is_string() && dtype->state->items[1]->text.size() == 1)
    order = dtype->state->items[1]->text[0];
  if (order == '=' || order == 0) order = '<';  // native: every ddpx platform is little-endian
  if (descr == "u1" || descr == "i1" || descr == "b1") order = '|';
  return std::string(1, order) + descr;
}

void Parser::check_array(NdArray& array) {
  int64_t item = array.item_size();
  if (item <= 0 || array.dtype.find('O') != std::string::npos)
    bad(fmt::format("unsupported array dtype '{}' (only plain numbers are read)", array.dtype));
  __int128 bytes = item;
  for (int64_t d : array.shape) {
    bytes *= d;
    if (bytes > static_cast<__int128>(in_.size())) break;
  }
  if (bytes != static_cast<__int128>(array.data.size()))
    bad(fmt::format("array data has {} bytes, its shape and dtype '{}' need more or fewer",
                    array.data.size(), array.dtype));
}

Value* Parser::reduce(Value* callable, Value* args) {
  if (callable->kind != Kind::kGlobal) bad("REDUCE on something that is not a global");
  if (args->kind != Kind::kTuple) bad("REDUCE arguments are not a tuple");
  const std::string& m = callable->module;
  const std::string& n = callable->name;
  const auto& a = args->items;
  bool numpy = m == "numpy.core.multiarray" || m == "numpy._core.multiarray" ||
               m == "numpy.core.numeric" || m == "numpy._core.numeric";
  if (numpy && n == "_reconstruct") return make(Kind::kNdarray);  // filled by BUILD
  if (numpy && n == "_frombuffer") {  // protocol 5: (buffer, dtype, shape, order)
    if (a.size() != 4 || !a[0]->is_string() || !a[3]->is_string()) bad("bad _frombuffer args");
    Value* v = make(Kind::kNdarray);
    v->array.data = a[0]->text;
    v->array.dtype = dtype_of(a[1]);
    v->array.shape = shape_of(a[2]);
    v->array.fortran_order = a[3]->text == "F";
    check_array(v->array);
    return v;
  }
  if (m == "_codecs" && n == "encode") {
    if (a.size() != 2 || a[0]->kind != Kind::kStr) bad("bad _codecs.encode args");
    return make_string(Kind::kBytes, latin1(a[0]->text));
  }
  if ((m == "__builtin__" || m == "builtins") && (n == "bytes" || n == "bytearray")) {
    if (a.empty()) return make_string(Kind::kBytes, "");
    if (a[0]->kind == Kind::kBytes) return make_string(Kind::kBytes, a[0]->text);
    if (a[0]->kind == Kind::kStr) return make_string(Kind::kBytes, latin1(a[0]->text));
    if (a[0]->kind == Kind::kList) {  // bytearray pickled as a list of ints
      std::string out;
      for (const Value* b : a[0]->items) {
        if (b->kind != Kind::kInt || b->integer < 0 || b->integer > 255) bad("bad bytearray item");
        out.push_back(static_cast<char>(b->integer));
      }
      return make_string(Kind::kBytes, std::move(out));
    }
    bad("bad bytes() arguments");
  }
  if (m == "collections" && n == "OrderedDict") return make(Kind::kDict);
  Value* v = make(Kind::kObject);
  v->module = m;
  v->name = n;
  v->args = a;
  return v;
}

void Parser::build(Value* obj, Value* state) {
  if (obj->kind == Kind::kNdarray) {
    // ndarray.__setstate__: (version, shape, dtype, is_fortran, data); version is optional.
    if (state->kind != Kind::kTuple) bad("ndarray state is not a tuple");
    auto s = state->items;
    if (s.size() == 5) s.erase(s.begin());
    if (s.size() != 4) bad("ndarray state must have 4 or 5 items");
    obj->array.shape = shape_of(s[0]);
    obj->array.dtype = dtype_of(s[1]);
    if (s[2]->kind != Kind::kBool && s[2]->kind != Kind::kInt) bad("is_fortran must be a bool");
    obj->array.fortran_order = s[2]->kind == Kind::kBool ? s[2]->boolean : s[2]->integer != 0;
    if (s[3]->kind == Kind::kStr) {
      obj->array.data = latin1(s[3]->text);
    } else if (s[3]->kind == Kind::kBytes) {
      obj->array.data = s[3]->text;
    } else {
      bad("ndarray data must be bytes (object arrays are not supported)");
    }
    check_array(obj->array);
  } else if (obj->kind == Kind::kObject) {
    obj->state = state;
  } else if (obj->kind == Kind::kDict && state->kind == Kind::kDict) {
    for (auto& e : state->entries) obj->entries.push_back(e);
  } else {
    bad(fmt::format("BUILD on a {}", kind_name(obj->kind)));
  }
}

Pickle Parser::run() {
  while (true) {
    op_pos_ = pos_;
    uint8_t op = u8();
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t proto = u8();
        if (proto > 5) bad(fmt::format("unsupported pickle protocol {}", proto));
        break;
      }
      case 0x95: need(uint_le(8) + 0); break;  // FRAME: only a read-ahead hint
      case '.': {  // STOP
        if (stack_.size() != 1 || !marks_.empty()) bad("STOP with an unbalanced stack");
        out_.root_ = stack_.back();
        return std::move(out_);
      }
      case '(':
        if (static_cast<int64_t>(marks_.size()) >= limits_.max_mark_depth) bad("MARKs nest too deep");
        marks_.push_back(stack_.size());
        break;
      case '0': pop(); break;  // POP
      case '1': pop_mark(); break;  // POP_MARK
      case '2': push(top()); break;  // DUP
      case '}': push(make(Kind::kDict)); break;
      case ']': push(make(Kind::kList)); break;
      case ')': push(make(Kind::kTuple)); break;
      case 'd': case 'l': case 't': {  // DICT, LIST, TUPLE from the items above the mark
        auto items = pop_mark();
        Value* v = make(op == 'd' ? Kind::kDict : op == 'l' ? Kind::kList : Kind::kTuple);
        if (op == 'd') {
          if (items.size() % 2) bad("DICT with an odd number of items");
          for (size_t i = 0; i < items.size(); i += 2) v->entries.emplace_back(items[i], items[i + 1]);
        } else {
          v->items = std::move(items);
        }
        push(v);
        break;
      }
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        size_t n = op - 0x84;
        if (stack_.size() < mark_floor() + n) bad("TUPLE with too few items");
        Value* v = make(Kind::kTuple);
        v->items.assign(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        push(v);
        break;
      }
      case 's': {  // SETITEM
        Value* value = pop();
        Value* key = pop();
        set_item(top(), key, value);
        break;
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark();
        if (items.size() % 2) bad("SETITEMS with an odd number of items");
        Value* dict = top();
        for (size_t i = 0; i < items.size(); i += 2) set_item(dict, items[i], items[i + 1]);
        break;
      }
      case 'a': { Value* item = pop(); append(top(), item); break; }  // APPEND
      case 'e': {  // APPENDS
        auto items = pop_mark();
        Value* list = top();
        for (Value* item : items) append(list, item);
        break;
      }
      case 0x8f: push(make(Kind::kList)); break;  // EMPTY_SET, read as a list
      case 0x90: {  // ADDITEMS
        auto items = pop_mark();
        Value* set = top();
        for (Value* item : items) append(set, item);
        break;
      }
      case 0x91: {  // FROZENSET
        Value* v = make(Kind::kList);
        v->items = pop_mark();
        push(v);
        break;
      }
      case 'J': { Value* v = make(Kind::kInt); v->integer = static_cast<int32_t>(uint_le(4)); push(v); break; }
      case 'K': { Value* v = make(Kind::kInt); v->integer = u8(); push(v); break; }
      case 'M': { Value* v = make(Kind::kInt); v->integer = static_cast<int64_t>(uint_le(2)); push(v); break; }
      case 0x8a: case 0x8b: {  // LONG1, LONG4: little-endian two's complement
        uint64_t n = op == 0x8a ? u8() : uint_le(4);
        if (n > 8) bad(fmt::format("an integer of {} bytes does not fit in 64 bits", n));
        uint64_t raw = n ? uint_le(static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);
        Value* v = make(Kind::kInt);
        v->integer = static_cast<int64_t>(raw);
        push(v);
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(in_[pos_ + i]);
        pos_ += 8;
        Value* v = make(Kind::kFloat);
        std::memcpy(&v->real, &bits, 8);
        push(v);
        break;
      }
      case 'N': push(make(Kind::kNone)); break;
      case 0x88: case 0x89: { Value* v = make(Kind::kBool); v->boolean = op == 0x88; push(v); break; }
      case 'T': push(make_string(Kind::kBytes, take(uint_le(4)))); break;  // BINSTRING (py2 str)
      case 'U': push(make_string(Kind::kBytes, take(u8()))); break;  // SHORT_BINSTRING
      case 'X': push(make_string(Kind::kStr, take(uint_le(4)))); break;  // BINUNICODE
      case 0x8c: push(make_string(Kind::kStr, take(u8()))); break;  // SHORT_BINUNICODE
      case 0x8d: push(make_string(Kind::kStr, take(uint_le(8)))); break;  // BINUNICODE8
      case 'B': push(make_string(Kind::kBytes, take(uint_le(4)))); break;  // BINBYTES
      case 'C': push(make_string(Kind::kBytes, take(u8()))); break;  // SHORT_BINBYTES
      case 0x8e: case 0x96:  // BINBYTES8, BYTEARRAY8
        push(make_string(Kind::kBytes, take(uint_le(8))));
        break;
      case 0x97: bad("out-of-band buffers (NEXT_BUFFER) are not supported");
      case 0x98: top(); break;  // READONLY_BUFFER: no-op on in-band data
      case 'q': memo_put(u8()); break;  // BINPUT
      case 'r': memo_put(uint_le(4)); break;  // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'h': push(memo_get(u8())); break;  // BINGET
      case 'j': push(memo_get(uint_le(4))); break;  // LONG_BINGET
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = line();
        std::string name = line();
        push(make_global(std::move(module), std::move(name)));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Value* name = pop();
        Value* module = pop();
        if (!module->is_string() || !name->is_string()) bad("STACK_GLOBAL needs two strings");
        push(make_global(module->text, name->text));
        break;
      }
      case 'R': {  // REDUCE
        Value* args = pop();
        Value* callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        Value* args = pop();
        Value* cls = pop();
        push(reduce(cls, expect(args, Kind::kTuple, "NEWOBJ arguments")));
        break;
      }
      case 'b': {  // BUILD
        Value* state = pop();
        build(top(), state);
        break;
      }
      case 'Q': {  // BINPERSID: torch's storages; kept as an opaque object
        Value* v = make(Kind::kObject);
        v->module = "persistent_id";
        v->args.push_back(pop());
        push(v);
        break;
      }
      default:
        bad(fmt::format("unsupported opcode 0x{:02x}", op));
    }
  }
}

Pickle parse(std::string_view bytes, const std::string& source, const Limits& limits) {
  Parser parser(bytes, source, limits);
  return parser.run();
}

Pickle parse_file(const std::string& path, const Limits& limits) {
  std::string bytes = read_file(path);
  return parse(bytes, path, limits);
}

}  // namespace ddpx::data::pickle
