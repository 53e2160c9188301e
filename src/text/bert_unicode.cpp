#include "text/bert_unicode.h"

#include <algorithm>
#include <iterator>

#include "text/utf8.h"

namespace ddpx::text::bert {
namespace {

struct CodeRange {
  uint32_t first;
  uint32_t last;
};
struct UncasedRow {
  uint32_t cp;
  uint32_t offset;  // into kUncasedBytes
  uint32_t length;
};

#include "text/bert_unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}

// Hangul syllables decompose into their jamo (Unicode's algorithm), which no casing changes.
constexpr uint32_t kHangulFirst = 0xAC00, kHangulCount = 11172;

}  // namespace

bool is_removed(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return cp == 0 || cp == 0xFFFD || in_ranges(kOther, cp);
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_punctuation(uint32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  return cp >= 128 && in_ranges(kPunctuation, cp);
}

bool is_chinese(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void append_uncased(uint32_t cp, std::string& out) {
  if (cp >= kHangulFirst && cp < kHangulFirst + kHangulCount) {
    uint32_t s = cp - kHangulFirst;
    append_utf8(0x1100 + s / 588, out);
    append_utf8(0x1161 + (s % 588) / 28, out);
    if (s % 28 != 0) append_utf8(0x11A7 + s % 28, out);
    return;
  }
  auto it = std::lower_bound(std::begin(kUncased), std::end(kUncased), cp,
                             [](const UncasedRow& r, uint32_t c) { return r.cp < c; });
  if (it == std::end(kUncased) || it->cp != cp) {
    append_utf8(cp, out);
    return;
  }
  out.append(reinterpret_cast<const char*>(kUncasedBytes) + it->offset, it->length);
}

}  // namespace ddpx::text::bert
