// Token files of real text for the language-model tests: a text's characters as tokens (one per
// distinct byte, in byte order, as a character tokenizer over ASCII text maps them), written
// as train.bin (the first nine tenths) and val.bin (the rest) by ddpx's llm.c-format writer.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/token_file.h"

namespace ddpx::test {

// Debian's copy of the GPL (base-files): 35 KB of English in every image of this project.
inline constexpr const char* kTokenText = "/usr/share/common-licenses/GPL-3";

inline void write_char_tokens(const std::string& dir, const std::string& text_path = kTokenText) {
  std::ifstream in(text_path, std::ios::binary);
  ASSERT_TRUE(in) << text_path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::map<unsigned char, uint32_t> id;
  for (unsigned char c : text) id.emplace(c, 0);
  uint32_t next = 0;
  for (auto& entry : id) entry.second = next++;
  std::vector<uint32_t> tokens;
  tokens.reserve(text.size());
  for (unsigned char c : text) tokens.push_back(id.at(c));
  const auto split = static_cast<std::ptrdiff_t>(tokens.size() * 9 / 10);
  io::write_token_file(dir + "/train.bin",
                       std::vector<uint32_t>(tokens.begin(), tokens.begin() + split));
  io::write_token_file(dir + "/val.bin",
                       std::vector<uint32_t>(tokens.begin() + split, tokens.end()));
}

// The same tokens for a masked LM: a vocab.json as `ddpx data tokenize --tokenizer wordpiece`
// writes, a vocabulary of 256 with [MASK] past the text's characters (BERT's recipes and docs
// commands read it; masked-LM needs [MASK]).
inline void write_masked_lm_chars(const std::string& dir) {
  write_char_tokens(dir);
  std::ofstream out(dir + "/vocab.json", std::ios::binary);
  out << R"({"tokenizer": "wordpiece", "vocab_size": 256, "special_tokens": {"[MASK]": 255}})";
  ASSERT_TRUE(out) << dir;
}

}  // namespace ddpx::test
