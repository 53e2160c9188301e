#include "text/bpe.h"

#include <limits>

#include "core/error.h"
#include "text/hf_bpe.h"
#include "text/utf8.h"

namespace ddpx::text {
namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
constexpr const char* kEndOfTextName = "<|endoftext|>";

}  // namespace

BpeTokenizer::BpeTokenizer(io::RankFile ranks)
    : tokens_(std::move(ranks.tokens)), pattern_(std::make_shared<Gpt2Pattern>()) {
  ranks_.reserve(tokens_.size() * 2);
  for (size_t r = 0; r < tokens_.size(); ++r) ranks_.emplace(tokens_[r], static_cast<uint32_t>(r));
}

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  return BpeTokenizer(is_hf_bpe(path) ? read_hf_bpe(path) : io::read_rank_file(path));
}

uint32_t BpeTokenizer::rank(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  return it == ranks_.end() ? kNoRank : it->second;
}

// tiktoken's _byte_pair_merge: parts[i] = (start of part i, rank of part i joined with part
// i+1). Each round merges the lowest-ranked pair (the leftmost of equals) and re-ranks its two
// neighbours. O(parts x merges), which beats a heap for the short pieces text is cut into.
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  uint32_t whole = rank(piece);
  if (whole != kNoRank) {
    out.push_back(whole);
    return;
  }
  struct Part {
    size_t start;
    uint32_t rank;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  for (size_t i = 0; i + 1 < piece.size(); ++i) parts.push_back({i, rank(piece.substr(i, 2))});
  parts.push_back({piece.size() - 1, kNoRank});
  parts.push_back({piece.size(), kNoRank});
  // The rank of parts[i] joined with parts[i+1] once parts[i+1] and parts[i+2] are one.
  auto joined_rank = [&](size_t i) {
    if (i + 3 >= parts.size()) return kNoRank;
    return rank(piece.substr(parts[i].start, parts[i + 3].start - parts[i].start));
  };
  while (true) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < best) {
        best = parts[i].rank;
        at = i;
      }
    }
    if (best == kNoRank) break;
    if (at > 0) parts[at - 1].rank = joined_rank(at - 1);
    parts[at].rank = joined_rank(at);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    uint32_t r = rank(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start));
    // Every single byte is a token (io/rank_file.h checks), so every part is one.
    DDPX_CHECK(r != kNoRank, ErrorKind::kInternal, "a BPE part is not a token");
    out.push_back(r);
  }
}

void BpeTokenizer::encode_valid(std::string_view text, size_t begin, size_t end,
                                std::vector<uint32_t>& out) const {
  pattern_->for_each_piece(text, begin, end, [&](size_t offset, size_t length) {
    encode_piece(text.substr(offset, length), out);
  });
}

void BpeTokenizer::encode(std::string_view text, size_t begin, size_t end,
                          std::vector<uint32_t>& out) const {
  size_t at = begin;
  while (at < end) {
    size_t valid_end = std::min(valid_utf8_end(text.substr(0, end), at), end);
    if (valid_end > at) {
      // The run reaches `end`: the text after it is the lookahead's context. It stops at an
      // invalid byte: the run is tokenized as a text of its own.
      encode_valid(valid_end == end ? text : text.substr(0, valid_end), at, valid_end, out);
      at = valid_end;
    }
    size_t invalid_end = at;
    while (invalid_end < end && utf8_char_length(text.substr(0, end), invalid_end) == 0)
      ++invalid_end;
    if (invalid_end > at) {
      encode_piece(text.substr(at, invalid_end - at), out);
      at = invalid_end;
    }
  }
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3);
  encode(text, 0, text.size(), out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string out;
  for (uint32_t t : tokens) {
    if (t == end_of_text()) {
      out += kEndOfTextName;
      continue;
    }
    DDPX_CHECK(t < tokens_.size(), ErrorKind::kData,
               "token {} is past the vocabulary of {} tokens; were these tokens made with "
               "another tokenizer?",
               t, vocab_size());
    out += tokens_[t];
  }
  return out;
}

}  // namespace ddpx::text
