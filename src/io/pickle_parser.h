// The pickle machine's internals, shared by pickle.cpp (the opcode loop) and pickle_reduce.cpp
// (what REDUCE, NEWOBJ and BUILD mean for numpy arrays, dtypes, bytes and dicts). Not a public
// header: include pickle.h.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/pickle.h"

namespace ddpx::io::pickle {

class Parser {
 public:
  Parser(std::string_view bytes, const std::string& source, const Limits& limits)
      : in_(bytes), source_(source), limits_(limits) {}

  Pickle run();

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorKind::kData, "{}: malformed pickle at byte {}: {} ({})", source_, op_pos_, what,
         limits_.advice);
  }
  void need(uint64_t n) const {
    if (n > in_.size() - pos_)
      bad(fmt::format("truncated: needs {} more bytes, {} left", n, in_.size() - pos_));
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(in_[pos_++]);
  }
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
  Value* make_int(int64_t value) {
    Value* v = make(Kind::kInt);
    v->integer = value;
    return v;
  }
  Value* make_string(Kind kind, std::string text) {
    Value* v = make(kind);
    v->text = std::move(text);
    return v;
  }
  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.size() <= mark_floor()) bad("stack underflow: pop from an empty stack");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= mark_floor()) bad("stack underflow: the stack is empty");
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
    if (v->kind != kind)
      bad(fmt::format("{} must be a {}, got {}", what, kind_name(kind), kind_name(v->kind)));
    return v;
  }
  void memo_put(uint64_t index) {
    if (static_cast<int64_t>(memo_.size()) >= limits_.max_memo && !memo_.count(index))
      bad(fmt::format("more than {} memo entries", limits_.max_memo));
    if (limits_.memo_in_order && index > memo_.size())
      bad(fmt::format("memo slot {} written out of order", index));
    memo_[index] = top();
  }
  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) bad(fmt::format("memo entry {} was never stored", index));
    return it->second;
  }
  // Counts slots added to lists and dicts: a few bytes of BUILD on a memoized dict double it.
  void link(size_t n) {
    links_ += static_cast<int64_t>(n);
    if (links_ > limits_.max_links)
      bad(fmt::format("more than {} list and dict items", limits_.max_links));
  }
  void set_item(Value* dict, Value* key, Value* value) {
    expect(dict, Kind::kDict, "the target of SETITEM");
    link(1);
    dict->entries.emplace_back(key, value);
  }
  void append(Value* list, Value* item) {
    if (list->kind != Kind::kList) bad(fmt::format("APPEND to a {}", kind_name(list->kind)));
    link(1);
    list->items.push_back(item);
  }
  Value* make_global(std::string module, std::string name) {
    if (!limits_.globals.empty() && limits_.globals.count(module + "." + name) == 0)
      bad(fmt::format("global {}.{} is not one this file may hold", module, name));
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
  int64_t links_ = 0;
  Pickle out_;
};

}  // namespace ddpx::io::pickle
