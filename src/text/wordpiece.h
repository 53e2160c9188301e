// BERT's tokenizer: the BasicTokenizer (text cleaning, CJK characters and punctuation as words
// of their own, white-space splitting; for an uncased vocabulary accents stripped and lower
// case) and then WordPiece over a vocab.txt (text/vocab_txt.h): each word is cut greedily into
// the longest tokens of the vocabulary from its start, pieces after the first spelled with a
// "##" prefix; a word longer than 100 characters, or one that cannot be spelled so, is [UNK].
// Token for token what transformers' BertTokenizerFast (do_lower_case as `lowercase`) gives on
// the same vocab.txt without special tokens (tests/text/wordpiece_test.cpp checks it on real
// text). Character classes: text/bert_unicode.h.
//
// Text must be valid UTF-8 (BertTokenizerFast takes Python strings); encode's caller checks it.
// Thread safety: const methods may run on any number of threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/vocab_txt.h"

namespace ddpx::text {

class WordPieceTokenizer {
 public:
  static constexpr size_t kMaxWordChars = 100;

  // `source` names the vocabulary in errors: one without "[UNK]" is refused.
  WordPieceTokenizer(VocabTxt vocab, bool lowercase, const std::string& source);
  static WordPieceTokenizer from_file(const std::string& vocab_txt, bool lowercase);

  // Appends the tokens of text[begin, end) (valid UTF-8). A cut between begin and end must be at
  // white space (split_points) for the pieces to tokenize as the whole does.
  void encode(std::string_view text, size_t begin, size_t end, std::vector<uint32_t>& out) const;
  std::vector<uint32_t> encode(std::string_view text) const;
  // Offsets of white-space bytes at or after each multiple of chunk_bytes: places to cut `text`.
  static std::vector<size_t> split_points(std::string_view text, size_t chunk_bytes);

  // The tokens joined as BERT's decoder does ("##" pieces glued to the piece before, others
  // separated by a space); an id past the vocabulary throws kData.
  std::string decode(const std::vector<uint32_t>& tokens) const;

  std::optional<uint32_t> id(std::string_view token) const;
  const std::string& token(uint32_t id) const { return tokens_.at(id); }
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  bool lowercase() const { return lowercase_; }
  uint32_t unk() const { return unk_; }

 private:
  void encode_word(std::string_view word, size_t chars, std::vector<uint32_t>& out) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string_view, uint32_t> ids_;  // views into tokens_
  bool lowercase_;
  uint32_t unk_ = 0;
};

}  // namespace ddpx::text
