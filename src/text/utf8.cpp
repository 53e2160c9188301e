#include "text/utf8.h"

namespace ddpx::text {

size_t utf8_char_length(std::string_view text, size_t at) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(text[at + i]); };
  auto cont = [&](size_t i) { return at + i < text.size() && (byte(i) & 0xC0) == 0x80; };
  uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 < 0xC2) return 0;  // a continuation byte, or an overlong two-byte lead (C0, C1)
  if (b0 < 0xE0) return cont(1) ? 2 : 0;
  if (b0 < 0xF0) {
    if (!cont(1) || !cont(2)) return 0;
    uint8_t b1 = byte(1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;   // overlong
    if (b0 == 0xED && b1 >= 0xA0) return 0;  // a UTF-16 surrogate
    return 3;
  }
  if (b0 < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    uint8_t b1 = byte(1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && b1 >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

size_t valid_utf8_end(std::string_view text, size_t at) {
  while (at < text.size()) {
    // ASCII eight bytes at a time: most text is mostly ASCII.
    while (at + 8 <= text.size()) {
      uint64_t word;
      __builtin_memcpy(&word, text.data() + at, 8);
      if (word & 0x8080808080808080ull) break;
      at += 8;
    }
    if (at >= text.size()) break;
    size_t n = utf8_char_length(text, at);
    if (n == 0) return at;
    at += n;
  }
  return text.size();
}

size_t first_invalid_utf8(std::string_view text) {
  size_t end = valid_utf8_end(text, 0);
  return end == text.size() ? std::string_view::npos : end;
}

uint32_t utf8_code_point(std::string_view text, size_t at, size_t length) {
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[at + i])); };
  switch (length) {
    case 1:
      return byte(0);
    case 2:
      return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3:
      return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default:
      return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) |
             (byte(3) & 0x3F);
  }
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace ddpx::text
