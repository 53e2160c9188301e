// nanoGPT's character tokenizer (data/shakespeare_char/prepare.py): the vocabulary is the sorted
// set of the characters (Unicode code points) of the text, a token is a character's index in
// it. The vocabulary is a JSON file beside the token files, so that the same one can tokenize
// more text and decode what a model generates:
//   {"tokenizer": "char", "vocab_size": 65, "chars": ["\n", " ", "!", ...]}
// (chars[i] is token i; JSON escapes keep control characters readable). Text must be valid
// UTF-8: a character vocabulary has no place for a stray byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ddpx::text {

class CharTokenizer {
 public:
  // The sorted set of the characters of `texts`; throws kData naming `sources[i]` and the byte
  // offset when texts[i] is not valid UTF-8.
  static CharTokenizer from_texts(const std::vector<std::string_view>& texts,
                                  const std::vector<std::string>& sources);
  // A vocabulary file written by save(); throws kData naming the file when it is missing or
  // not one.
  static CharTokenizer load(const std::string& path);
  // Writes the vocabulary JSON atomically.
  void save(const std::string& path) const;

  // Appends the tokens of text[begin, end); `source` names the text in errors (invalid UTF-8,
  // a character the vocabulary lacks).
  void encode(std::string_view text, size_t begin, size_t end, const std::string& source,
              std::vector<uint32_t>& out) const;
  std::string decode(const std::vector<uint32_t>& tokens) const;

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  const std::vector<uint32_t>& code_points() const { return chars_; }

 private:
  explicit CharTokenizer(std::vector<uint32_t> chars);
  std::vector<uint32_t> chars_;  // sorted code points; the index is the token
  std::unordered_map<uint32_t, uint32_t> index_;
  std::vector<int32_t> ascii_;  // token of each ASCII code point, -1 if absent
};

}  // namespace ddpx::text
