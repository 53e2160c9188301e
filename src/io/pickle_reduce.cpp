// What the few data-building callables mean: numpy arrays and dtypes, bytes under protocol 2,
// OrderedDict. Everything else stays an opaque Object (nothing is ever executed).
#include "io/pickle_parser.h"

namespace ddpx::io::pickle {

// Python 3 pickles bytes under protocol 2 as _codecs.encode(str, 'latin1'): undo the UTF-8.
std::string Parser::latin1(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    auto c = static_cast<uint8_t>(utf8[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c & 0xE0) == 0xC0 && i + 1 < utf8.size() && c <= 0xC3) {
      auto next = static_cast<uint8_t>(utf8[++i]);
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (next & 0x3F)));
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
    link(state->entries.size());
    auto entries = state->entries;  // a copy: the state may be the dict itself (memo)
    obj->entries.insert(obj->entries.end(), entries.begin(), entries.end());
  } else {
    bad(fmt::format("BUILD on a {}", kind_name(obj->kind)));
  }
}

}  // namespace ddpx::io::pickle
