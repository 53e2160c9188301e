// GPT-2's tokenizer: byte-level byte-pair encoding over a tiktoken rank file, with GPT-2's
// pre-tokenisation (text/gpt2_pattern.h), token for token what the `tiktoken` package's
// encode_ordinary gives on the same rank file (tests/text/ check it on real text).
//
// Algorithm (tiktoken's): the text is cut into pieces by the pattern; a piece that is a token
// is that token; otherwise its bytes start as single-byte parts and the adjacent pair whose
// concatenation has the lowest rank is merged, again and again, until no adjacent pair is a
// token. Ranks are merge priorities, so no list of merges is needed.
//
// Text that is not valid UTF-8: the regex only sees valid UTF-8, so each run of bytes that do
// not form valid characters (text/utf8.h) is a piece of its own, byte-pair merged like any other
// (bytes are tokens: decode gives the exact bytes back), and the valid text on either side is
// tokenized as if the run were the end and the start of a text. tiktoken's encode takes only
// Python strings, which cannot hold such bytes; per run this is its _encode_single_piece.
//
// Thread safety: const methods may run on any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/rank_file.h"
#include "text/gpt2_pattern.h"

namespace ddpx::text {

class BpeTokenizer {
 public:
  // The ranks are the mergeable tokens; <|endoftext|> is the id after them (50256 for GPT-2).
  explicit BpeTokenizer(io::RankFile ranks);
  // `path`: a tiktoken rank file, or Hugging Face's vocab.json + merges.txt (text/hf_bpe.h):
  // the vocab.json, or the folder holding both.
  static BpeTokenizer from_file(const std::string& path);

  // Appends the tokens of text[begin, end) to `out`; `text` past `end` is context only (see
  // Gpt2Pattern::for_each_piece: `end` is the text's end or one of its split points). Special
  // tokens are not recognised: "<|endoftext|>" in the text is text (tiktoken's encode_ordinary).
  void encode(std::string_view text, size_t begin, size_t end, std::vector<uint32_t>& out) const;
  std::vector<uint32_t> encode(std::string_view text) const;

  // The bytes of the tokens; <|endoftext|> decodes to its name. Throws kData for an id past the
  // vocabulary.
  std::string decode(const std::vector<uint32_t>& tokens) const;

  uint32_t end_of_text() const { return static_cast<uint32_t>(tokens_.size()); }
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()) + 1; }

 private:
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void encode_valid(std::string_view text, size_t begin, size_t end,
                    std::vector<uint32_t>& out) const;
  uint32_t rank(std::string_view bytes) const;

  std::vector<std::string> tokens_;                       // bytes by rank
  std::unordered_map<std::string_view, uint32_t> ranks_;  // views into tokens_
  std::shared_ptr<const Gpt2Pattern> pattern_;
};

}  // namespace ddpx::text
