#include "text/gpt2_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace ddpx::text {
namespace {

// Unicode's White_Space property (PropList.txt, unchanged since Unicode 6.3), which Rust's `\s`
// (tiktoken's engine) follows. PCRE2's `\s` with UCP is \p{Zs} plus \h and \v, which also holds
// U+180E MONGOLIAN VOWEL SEPARATOR (White_Space until 6.3): with it, "a \u180e" would cut
// differently from tiktoken. So the pattern spells the property out, and uses PCRE2 only for
// the letter and number classes.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// GPT-2's pattern in the equivalent form tiktoken's r50k_base uses (possessive quantifiers, and
// `\s++$|\s+(?!\S)|\s` for `\s+(?!\S)|\s+`), which backtracks less.
std::string gpt2_pattern() {
  std::string ws = kWhiteSpace;
  return R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^)" + ws + R"(\p{L}\p{N}]++|[)" + ws +
         R"(]++$|[)" + ws + R"(]+(?![^)" + ws + R"(])|[)" + ws + "]";
}

}  // namespace

struct Gpt2Pattern::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Gpt2Pattern::Gpt2Pattern() : compiled_(std::make_unique<Compiled>()) {
  std::string pattern = gpt2_pattern();
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UTF: code points, not bytes; UCP: \p{L} and \p{N} by Unicode properties; DOLLAR_ENDONLY:
  // `$` is the end of the text only, as in Rust (PCRE2's default also matches before a final
  // newline); NO_UTF_CHECK at match time: the caller has validated the text (text/utf8.h).
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail(ErrorKind::kInternal, "GPT-2's pattern does not compile with PCRE2 at {}: {}", offset,
         reinterpret_cast<const char*>(message));
  }
  // Without the JIT (a PCRE2 built without it) matching is slower but the same.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Gpt2Pattern::~Gpt2Pattern() = default;

void Gpt2Pattern::for_each_piece(std::string_view text, size_t begin, size_t end,
                                 const std::function<void(size_t, size_t)>& on_piece) const {
  if (begin >= end) return;
  // The subject stops one character past `end`: enough for the lookahead, and pieces never
  // cross `end` (a split point or the text's end).
  size_t subject_end = end;
  if (end < text.size()) {
    subject_end = end + 1;
    while (subject_end < text.size() && (static_cast<uint8_t>(text[subject_end]) & 0xC0) == 0x80)
      ++subject_end;
  }
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  DDPX_CHECK(match != nullptr, ErrorKind::kInternal, "PCRE2 cannot allocate match data");
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = begin;
  while (at < end) {
    int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, subject_end, at, 0,
                                              match.get(), nullptr)
                            : pcre2_match(compiled_->code, subject, subject_end, at,
                                          PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc < 0) {
      // Every character matches some branch (\p{L}, \p{N}, whitespace or the rest), so the only
      // failure is PCRE2's own limits.
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail(ErrorKind::kInternal, "PCRE2 failed at byte {} of the text: {}", at,
           reinterpret_cast<const char*>(message));
    }
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    size_t start = ovector[0];
    size_t stop = ovector[1];
    DDPX_CHECK(start == at && stop > start, ErrorKind::kInternal,
               "GPT-2's pattern skipped or matched nothing at byte {}", at);
    on_piece(start, stop - start);
    at = stop;
  }
}

std::vector<size_t> Gpt2Pattern::split_points(std::string_view text, size_t chunk_bytes) {
  std::vector<size_t> points;
  if (chunk_bytes == 0) return points;
  size_t at = chunk_bytes;
  while (at < text.size()) {
    size_t nl = text.find('\n', at - 1);
    while (nl != std::string_view::npos && nl + 1 < text.size()) {
      auto next = static_cast<uint8_t>(text[nl + 1]);
      if (next > 0x20 && next < 0x7F) break;
      nl = text.find('\n', nl + 1);
    }
    if (nl == std::string_view::npos || nl + 1 >= text.size()) break;
    points.push_back(nl + 1);
    at = nl + 1 + chunk_bytes;
  }
  return points;
}

}  // namespace ddpx::text
