// GPT-2's pre-tokenisation: the regular expression that cuts text into the pieces BPE merges
// within ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), matched
// by PCRE2 with Unicode properties and its JIT. A real regex engine, because tiktoken uses one
// (Rust's fancy-regex over regex): the lookahead and the Unicode letter and number classes must
// behave exactly as there for the tokens to be equal, and both engines give leftmost-first
// backtracking semantics.
//
// Thread safety: one Gpt2Pattern is shared by any number of threads; each for_each_piece call
// has its own match data.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace ddpx::text {

class Gpt2Pattern {
 public:
  Gpt2Pattern();
  ~Gpt2Pattern();
  Gpt2Pattern(const Gpt2Pattern&) = delete;
  Gpt2Pattern& operator=(const Gpt2Pattern&) = delete;

  // Calls on_piece(offset, length) for each piece of text[begin, end) in order; `text` must be
  // valid UTF-8 over [begin, end) and the one character after `end` when end < text.size() (the
  // lookahead's context; pieces never cross a split point, see split_points). Throws kInternal
  // only if PCRE2 itself fails (its match limits).
  void for_each_piece(std::string_view text, size_t begin, size_t end,
                      const std::function<void(size_t, size_t)>& on_piece) const;

  // Offsets where the pattern always cuts, whatever precedes them: just after a '\n' that a
  // printable ASCII character follows (no piece holds both whitespace and something else, save
  // a leading U+0020). About one every `chunk_bytes`, for cutting a large text into chunks whose
  // pieces, hence tokens, are those of the whole. Sorted, each in (0, text.size()).
  static std::vector<size_t> split_points(std::string_view text, size_t chunk_bytes);

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace ddpx::text
