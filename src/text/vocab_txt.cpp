#include "text/vocab_txt.h"

#include <filesystem>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "text/utf8.h"

namespace ddpx::text {

VocabTxt parse_vocab_txt(std::string_view bytes, const std::string& source) {
  DDPX_CHECK(!bytes.empty(), ErrorKind::kData,
             "{}: empty; expected a BERT vocab.txt (one WordPiece token per line)", source);
  size_t bad = first_invalid_utf8(bytes);
  if (bad != std::string_view::npos) {
    size_t line = 1;
    for (size_t i = 0; i < bad; ++i) line += bytes[i] == '\n';
    fail(ErrorKind::kData,
         "{}: line {} is not valid UTF-8; expected a BERT vocab.txt (one WordPiece token per "
         "line, UTF-8)",
         source, line);
  }
  VocabTxt vocab;
  std::unordered_map<std::string_view, size_t> seen;
  size_t at = 0;
  while (at < bytes.size()) {
    size_t end = bytes.find('\n', at);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view token = bytes.substr(at, end - at);
    if (!token.empty() && token.back() == '\r') token.remove_suffix(1);
    DDPX_CHECK(vocab.tokens.size() < (size_t{1} << 31) - 1, ErrorKind::kData,
               "{}: more than 2^31 - 1 tokens; token ids are int32", source);
    vocab.tokens.emplace_back(token);
    at = end + 1;
  }
  seen.reserve(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    auto [it, fresh] = seen.emplace(vocab.tokens[i], i);
    DDPX_CHECK(fresh, ErrorKind::kData,
               "{}: the token '{}' is on line {} and line {}; a vocab.txt lists each token once "
               "(its id is its line)",
               source, vocab.tokens[i], it->second + 1, i + 1);
  }
  return vocab;
}

VocabTxt read_vocab_txt(const std::string& path) {
  DDPX_CHECK(std::filesystem::is_regular_file(path), ErrorKind::kData,
             "{}: no such vocab.txt; give --vocab the vocab.txt of a BERT model (e.g. from its "
             "Hugging Face folder)",
             path);
  return parse_vocab_txt(read_file(path), path);
}

}  // namespace ddpx::text
