#include "io/rank_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ddpx::io {
namespace {

// Token ids are int32 in token files and tensors.
constexpr int64_t kMaxRank = (int64_t{1} << 31) - 1;

// Standard base64 (RFC 4648, '+' and '/', '=' padding), as Python's base64.b64decode reads it.
// Returns false on anything else.
bool decode_base64(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t padding = 0;
  if (in.back() == '=') padding = in[in.size() - 2] == '=' ? 2 : 1;
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = in[i + k];
      int8_t d = table[static_cast<uint8_t>(c)];
      if (last && k >= 4 - padding) {
        if (c != '=') return false;
        d = 0;
      } else if (d < 0) {
        return false;
      }
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<char>(v >> 16));
    if (!last || padding < 2) out.push_back(static_cast<char>((v >> 8) & 0xff));
    if (!last || padding < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return true;
}

}  // namespace

RankFile parse_rank_file(std::string_view bytes, const std::string& source) {
  struct Entry {
    int64_t rank;
    size_t line_no;
    std::string token;
  };
  std::vector<Entry> entries;
  std::string token;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view line = bytes.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // tiktoken skips empty lines too
    size_t space = line.find(' ');
    DDPX_CHECK(space != std::string_view::npos, ErrorKind::kData,
               "{}: line {} is not `BASE64 RANK`; is this a tiktoken rank file (gpt2.tiktoken)? "
               "Get one with `ddpx data download gpt2-vocab`",
               source, line_no);
    std::string_view encoded = line.substr(0, space);
    std::string_view number = line.substr(space + 1);
    int64_t rank = -1;
    auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), rank);
    DDPX_CHECK(
        ec == std::errc() && ptr == number.data() + number.size() && rank >= 0 && rank <= kMaxRank,
        ErrorKind::kData,
        "{}: line {}: the rank is not a number in 0..{}; is this a tiktoken rank file "
        "(gpt2.tiktoken)? Get one with `ddpx data download gpt2-vocab`",
        source, line_no, kMaxRank);
    DDPX_CHECK(decode_base64(encoded, token), ErrorKind::kData,
               "{}: line {}: the token is not valid base64; the file is damaged: get it again "
               "with `ddpx data download gpt2-vocab`",
               source, line_no);
    entries.push_back({rank, line_no, token});
  }
  DDPX_CHECK(!entries.empty(), ErrorKind::kData,
             "{}: no tokens; is this a tiktoken rank file (gpt2.tiktoken)? Get one with `ddpx "
             "data download gpt2-vocab`",
             source);
  // N lines must hold the ranks 0..N-1, each once; the table is sized by N, never by a rank.
  RankFile file;
  file.tokens.resize(entries.size());
  std::vector<size_t> line_of(entries.size(), 0);
  std::vector<int64_t> beyond;
  for (auto& e : entries) {
    if (static_cast<size_t>(e.rank) >= entries.size()) {
      beyond.push_back(e.rank);
      continue;
    }
    DDPX_CHECK(line_of[e.rank] == 0, ErrorKind::kData,
               "{}: line {}: rank {} is already given on line {}; the file is damaged: get it "
               "again with `ddpx data download gpt2-vocab`",
               source, e.line_no, e.rank, line_of[e.rank]);
    line_of[e.rank] = e.line_no;
    file.tokens[e.rank] = std::move(e.token);
  }
  if (!beyond.empty()) {
    size_t missing = 0;
    while (line_of[missing] != 0) ++missing;
    fail(ErrorKind::kData,
         "{}: rank {} is missing ({} lines, ranks up to {}); the file is damaged: get it again "
         "with `ddpx data download gpt2-vocab`",
         source, missing, entries.size(), *std::max_element(beyond.begin(), beyond.end()));
  }
  std::unordered_map<std::string_view, size_t> rank_of;
  rank_of.reserve(file.tokens.size());
  for (size_t r = 0; r < file.tokens.size(); ++r) {
    auto [it, inserted] = rank_of.emplace(file.tokens[r], r);
    DDPX_CHECK(inserted, ErrorKind::kData,
               "{}: line {}: the token of rank {} is already rank {}; the file is damaged: get it "
               "again with `ddpx data download gpt2-vocab`",
               source, line_of[r], r, it->second);
  }
  for (int b = 0; b < 256; ++b) {
    char byte = static_cast<char>(b);
    DDPX_CHECK(rank_of.count(std::string_view(&byte, 1)) == 1, ErrorKind::kData,
               "{}: the single byte 0x{:02x} is not a token, so byte-level BPE cannot spell every "
               "text; is this a byte-level rank file (gpt2.tiktoken)?",
               source, b);
  }
  return file;
}

RankFile read_rank_file(const std::string& path) {
  struct stat st;
  DDPX_CHECK(::stat(path.c_str(), &st) == 0, ErrorKind::kData,
             "{}: no such rank file; get GPT-2's with `ddpx data download gpt2-vocab` (into "
             "data/gpt2-vocab/, where --vocab looks by default) or pass another with --vocab",
             path);
  DDPX_CHECK(S_ISREG(st.st_mode), ErrorKind::kData,
             "{}: not a regular file, expected a tiktoken rank file (gpt2.tiktoken)", path);
  return parse_rank_file(read_file(path), path);
}

}  // namespace ddpx::io
