#include "text/wordpiece.h"

#include "core/error.h"
#include "text/bert_unicode.h"
#include "text/utf8.h"

namespace ddpx::text {

WordPieceTokenizer::WordPieceTokenizer(VocabTxt vocab, bool lowercase, const std::string& source)
    : tokens_(std::move(vocab.tokens)), lowercase_(lowercase) {
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<uint32_t>(i));
  auto unk = id("[UNK]");
  DDPX_CHECK(unk.has_value(), ErrorKind::kData,
             "{}: no [UNK] token; a BERT vocab.txt needs [UNK] for words it cannot spell", source);
  unk_ = *unk;
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocab_txt, bool lowercase) {
  return WordPieceTokenizer(read_vocab_txt(vocab_txt), lowercase, vocab_txt);
}

std::optional<uint32_t> WordPieceTokenizer::id(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

// Greedy longest-match-first (BERT's WordpieceTokenizer).
void WordPieceTokenizer::encode_word(std::string_view word, size_t chars,
                                     std::vector<uint32_t>& out) const {
  if (chars > kMaxWordChars) {
    out.push_back(unk_);
    return;
  }
  size_t mark = out.size();
  std::string piece;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    std::optional<uint32_t> found;
    while (end > start) {
      piece.assign(start > 0 ? "##" : "");
      piece.append(word.substr(start, end - start));
      found = id(piece);
      if (found) break;
      do --end;  // back one character
      while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      out.resize(mark);
      out.push_back(unk_);
      return;
    }
    out.push_back(*found);
    start = end;
  }
}

void WordPieceTokenizer::encode(std::string_view text, size_t begin, size_t end,
                                std::vector<uint32_t>& out) const {
  std::string word;
  size_t chars = 0;
  auto finish = [&] {
    if (!word.empty()) encode_word(word, chars, out);
    word.clear();
    chars = 0;
  };
  std::string form;
  for (size_t at = begin; at < end;) {
    size_t n = utf8_char_length(text, at);
    if (n == 0) n = 1;  // the caller checked the text; a stray byte is skipped
    uint32_t cp = utf8_code_point(text, at, n);
    at += n;
    if (bert::is_removed(cp)) continue;
    if (bert::is_chinese(cp)) {  // a word of its own; no casing or accents
      finish();
      append_utf8(cp, word);
      chars = 1;
      finish();
      continue;
    }
    form.clear();
    if (lowercase_)
      bert::append_uncased(cp, form);
    else
      append_utf8(cp, form);
    for (size_t k = 0; k < form.size();) {
      size_t m = utf8_char_length(form, k);
      uint32_t c = utf8_code_point(form, k, m);
      if (bert::is_whitespace(c)) {
        finish();
      } else if (bert::is_punctuation(c)) {
        finish();
        word.assign(form, k, m);
        chars = 1;
        finish();
      } else {
        word.append(form, k, m);
        ++chars;
      }
      k += m;
    }
  }
  finish();
}

std::vector<uint32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  encode(text, 0, text.size(), out);
  return out;
}

std::vector<size_t> WordPieceTokenizer::split_points(std::string_view text, size_t chunk_bytes) {
  std::vector<size_t> points;
  auto space = [&](size_t i) {
    char c = text[i];
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
  };
  for (size_t at = chunk_bytes; at < text.size(); at += chunk_bytes) {
    while (at < text.size() && !space(at)) ++at;
    if (at < text.size() && (points.empty() || points.back() < at)) points.push_back(at);
  }
  return points;
}

std::string WordPieceTokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string out;
  for (uint32_t t : tokens) {
    DDPX_CHECK(t < tokens_.size(), ErrorKind::kData,
               "token {} is past the {} tokens of the vocab.txt; give the vocabulary the data was "
               "tokenized with",
               t, tokens_.size());
    const std::string& s = tokens_[t];
    if (s.rfind("##", 0) == 0) {
      out.append(s, 2);
    } else {
      if (!out.empty()) out.push_back(' ');
      out.append(s);
    }
  }
  return out;
}

}  // namespace ddpx::text
