// UTF-8 validity as Python's strict decoder and PCRE2 define it (no overlong forms, no
// surrogates, nothing past U+10FFFF). The tokenizers split text into valid runs and invalid
// bytes with it: the regex engine only ever sees valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddpx::text {

// The length of the valid UTF-8 character starting at text[at], or 0 when the byte there does
// not start one (a stray continuation byte, a truncated or overlong sequence, a surrogate).
size_t utf8_char_length(std::string_view text, size_t at);

// The end of the run of valid UTF-8 starting at `at` (text.size() when it runs to the end).
size_t valid_utf8_end(std::string_view text, size_t at);

// The offset of the first byte that does not start a valid character, or npos.
size_t first_invalid_utf8(std::string_view text);

// The code point of the valid character at text[at] of `length` bytes.
uint32_t utf8_code_point(std::string_view text, size_t at, size_t length);

// Appends the code point `cp` (at most U+10FFFF) as UTF-8.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace ddpx::text
