#include "text/char_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "text/utf8.h"

namespace ddpx::text {
namespace {

[[noreturn]] void not_utf8(const std::string& source, size_t at) {
  fail(ErrorKind::kData,
       "{}: byte {} is not valid UTF-8, and the char tokenizer's vocabulary holds characters; "
       "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), or use --tokenizer gpt2, "
       "whose tokens are bytes",
       source, at);
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<uint32_t> chars)
    : chars_(std::move(chars)), ascii_(128, -1) {
  for (size_t i = 0; i < chars_.size(); ++i) {
    index_.emplace(chars_[i], static_cast<uint32_t>(i));
    if (chars_[i] < 128) ascii_[chars_[i]] = static_cast<int32_t>(i);
  }
}

CharTokenizer CharTokenizer::from_texts(const std::vector<std::string_view>& texts,
                                        const std::vector<std::string>& sources) {
  std::array<bool, 128> ascii{};
  std::vector<uint32_t> others;
  for (size_t t = 0; t < texts.size(); ++t) {
    std::string_view text = texts[t];
    for (size_t at = 0; at < text.size();) {
      size_t n = utf8_char_length(text, at);
      if (n == 0) not_utf8(sources[t], at);
      uint32_t cp = utf8_code_point(text, at, n);
      if (cp < 128)
        ascii[cp] = true;
      else
        others.push_back(cp);
      at += n;
    }
  }
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  std::vector<uint32_t> chars;
  for (uint32_t c = 0; c < 128; ++c)
    if (ascii[c]) chars.push_back(c);
  chars.insert(chars.end(), others.begin(), others.end());
  return CharTokenizer(std::move(chars));
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  DDPX_CHECK(std::filesystem::is_regular_file(path), ErrorKind::kData,
             "{}: no such vocabulary file; `ddpx data tokenize --tokenizer char` writes one "
             "(vocab.json beside train.bin)",
             path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kData,
         "{}: not JSON ({}); expected the vocab.json that `ddpx data tokenize "
         "--tokenizer char` writes",
         path, e.what());
  }
  auto bad = [&](const std::string& what) {
    fail(ErrorKind::kData,
         "{}: {}; expected {{\"tokenizer\": \"char\", \"chars\": [...]}} as `ddpx data tokenize "
         "--tokenizer char` writes it",
         path, what);
  };
  if (!json.is_object() || json.value("tokenizer", std::string()) != "char")
    bad("not a char vocabulary");
  auto it = json.find("chars");
  if (it == json.end() || !it->is_array()) bad("no \"chars\" list");
  std::vector<uint32_t> chars;
  for (const auto& c : *it) {
    if (!c.is_string()) bad("an entry of \"chars\" is not a string");
    std::string s = c.get<std::string>();
    size_t n = s.empty() ? 0 : utf8_char_length(s, 0);
    if (n == 0 || n != s.size())
      bad(fmt::format("entry {} of \"chars\" is not one character", chars.size()));
    uint32_t cp = utf8_code_point(s, 0, n);
    if (!chars.empty() && cp <= chars.back()) bad("\"chars\" is not sorted without repeats");
    chars.push_back(cp);
  }
  if (chars.empty()) bad("\"chars\" is empty");
  return CharTokenizer(std::move(chars));
}

void CharTokenizer::save(const std::string& path) const {
  nlohmann::json chars = nlohmann::json::array();
  for (uint32_t cp : chars_) {
    std::string s;
    append_utf8(cp, s);
    chars.push_back(s);
  }
  nlohmann::json json = {{"tokenizer", "char"}, {"vocab_size", chars_.size()}, {"chars", chars}};
  write_file_atomic(path, json.dump(1) + "\n");
}

void CharTokenizer::encode(std::string_view text, size_t begin, size_t end,
                           const std::string& source, std::vector<uint32_t>& out) const {
  for (size_t at = begin; at < end;) {
    auto byte = static_cast<uint8_t>(text[at]);
    if (byte < 128 && ascii_[byte] >= 0) {
      out.push_back(static_cast<uint32_t>(ascii_[byte]));
      ++at;
      continue;
    }
    size_t n = utf8_char_length(text, at);
    if (n == 0) not_utf8(source, at);
    uint32_t cp = utf8_code_point(text, at, n);
    auto it = index_.find(cp);
    if (it == index_.end()) {
      std::string c;
      append_utf8(cp, c);
      fail(ErrorKind::kData,
           "{}: the character U+{:04X} ({}) at byte {} is not in the vocabulary of {} "
           "characters; tokenize this text with a vocabulary made from it too (leave out "
           "--vocab)",
           source, cp, nlohmann::json(c).dump(), at, chars_.size());
    }
    out.push_back(it->second);
    at += n;
  }
}

std::string CharTokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string out;
  for (uint32_t t : tokens) {
    DDPX_CHECK(t < chars_.size(), ErrorKind::kData,
               "token {} is past the vocabulary of {} characters; were these tokens made with "
               "another vocabulary?",
               t, chars_.size());
    append_utf8(chars_[t], out);
  }
  return out;
}

}  // namespace ddpx::text
