// The pickle virtual machine, restricted to data: see pickle.h for what is interpreted.
#include "io/pickle.h"

#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/pickle_parser.h"

namespace ddpx::io::pickle {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kBytes:
      return "bytes";
    case Kind::kStr:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNdarray:
      return "ndarray";
    case Kind::kGlobal:
      return "global";
    case Kind::kObject:
      return "object";
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

Pickle Parser::run() {
  while (true) {
    op_pos_ = pos_;
    uint8_t op = u8();
    if (!limits_.opcodes.empty() &&
        limits_.opcodes.find(static_cast<char>(op)) == std::string::npos)
      bad(fmt::format("unsupported opcode 0x{:02x}", op));
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t proto = u8();
        if (proto > 5) bad(fmt::format("unsupported pickle protocol {}", proto));
        break;
      }
      case 0x95:  // FRAME: only a read-ahead hint
        need(uint_le(8) + 0);
        break;
      case '.': {  // STOP
        if (stack_.size() != 1 || !marks_.empty()) bad("STOP with an unbalanced stack");
        out_.root_ = stack_.back();
        return std::move(out_);
      }
      case '(':
        if (static_cast<int64_t>(marks_.size()) >= limits_.max_mark_depth)
          bad("MARKs nest too deep");
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        pop();
        break;
      case '1':  // POP_MARK
        pop_mark();
        break;
      case '2':  // DUP
        push(top());
        break;
      case '}':
        push(make(Kind::kDict));
        break;
      case ']':
        push(make(Kind::kList));
        break;
      case ')':
        push(make(Kind::kTuple));
        break;
      case 'd':
      case 'l':
      case 't': {  // DICT, LIST, TUPLE from the items above the mark
        auto items = pop_mark();
        Value* v = make(op == 'd' ? Kind::kDict : op == 'l' ? Kind::kList : Kind::kTuple);
        if (op == 'd') {
          if (items.size() % 2) bad("DICT with an odd number of items");
          for (size_t i = 0; i < items.size(); i += 2)
            v->entries.emplace_back(items[i], items[i + 1]);
        } else {
          v->items = std::move(items);
        }
        push(v);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        size_t n = op - 0x84;
        if (stack_.size() < mark_floor() + n) bad("stack underflow: TUPLE with too few items");
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
      case 'a': {
        Value* item = pop();
        append(top(), item);
        break;
      }            // APPEND
      case 'e': {  // APPENDS
        auto items = pop_mark();
        Value* list = top();
        for (Value* item : items) append(list, item);
        break;
      }
      case 0x8f:  // EMPTY_SET, read as a list
        push(make(Kind::kList));
        break;
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
      case 'J':  // BININT
        push(make_int(static_cast<int32_t>(uint_le(4))));
        break;
      case 'K':  // BININT1
        push(make_int(u8()));
        break;
      case 'M':  // BININT2
        push(make_int(static_cast<int64_t>(uint_le(2))));
        break;
      case 0x8a:
      case 0x8b: {  // LONG1, LONG4: little-endian two's complement
        uint64_t n = op == 0x8a ? u8() : uint_le(4);
        if (n > 8) bad(fmt::format("an integer of {} bytes does not fit in 64 bits", n));
        uint64_t raw = n ? uint_le(static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);
        push(make_int(static_cast<int64_t>(raw)));
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
      case 'N':
        push(make(Kind::kNone));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        Value* v = make(Kind::kBool);
        v->boolean = op == 0x88;
        push(v);
        break;
      }
      case 'T':  // BINSTRING (py2 str)
        push(make_string(Kind::kBytes, take(uint_le(4))));
        break;
      case 'U':  // SHORT_BINSTRING
        push(make_string(Kind::kBytes, take(u8())));
        break;
      case 'X':  // BINUNICODE
        push(make_string(Kind::kStr, take(uint_le(4))));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push(make_string(Kind::kStr, take(u8())));
        break;
      case 0x8d:  // BINUNICODE8
        push(make_string(Kind::kStr, take(uint_le(8))));
        break;
      case 'B':  // BINBYTES
        push(make_string(Kind::kBytes, take(uint_le(4))));
        break;
      case 'C':  // SHORT_BINBYTES
        push(make_string(Kind::kBytes, take(u8())));
        break;
      case 0x8e:
      case 0x96:  // BINBYTES8, BYTEARRAY8
        push(make_string(Kind::kBytes, take(uint_le(8))));
        break;
      case 0x97:
        bad("out-of-band buffers (NEXT_BUFFER) are not supported");
      case 0x98:  // READONLY_BUFFER: no-op on in-band data
        top();
        break;
      case 'q':  // BINPUT
        memo_put(u8());
        break;
      case 'r':  // LONG_BINPUT
        memo_put(uint_le(4));
        break;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        break;
      case 'h':  // BINGET
        push(memo_get(u8()));
        break;
      case 'j':  // LONG_BINGET
        push(memo_get(uint_le(4)));
        break;
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

}  // namespace ddpx::io::pickle
