// The character classes of BERT's BasicTokenizer as Hugging Face's `tokenizers` implements them
// (BertNormalizer, BertPreTokenizer), from tables generated with Python's unicodedata
// (src/text/make_bert_unicode.py; the Unicode version is in bert_unicode_tables.inc).
#pragma once

#include <cstdint>
#include <string>

namespace ddpx::text::bert {

// Removed by text cleaning: NUL, U+FFFD and every "other" character (general category C*:
// control, format, surrogate, private use, unassigned) except tab, newline and carriage return.
bool is_removed(uint32_t cp);
// White space (Unicode's White_Space property, as Rust's char::is_whitespace); words end there.
bool is_whitespace(uint32_t cp);
// ASCII punctuation and symbols (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) and Unicode punctuation
// (category P*): each is a word of its own.
bool is_punctuation(uint32_t cp);
// CJK ideographs (BERT's ranges): each is a word of its own.
bool is_chinese(uint32_t cp);
// An uncased vocabulary's form of a character: accents stripped (NFD without nonspacing marks)
// then lower-cased, appended to `out` as UTF-8 (possibly nothing, or several characters).
void append_uncased(uint32_t cp, std::string& out);

}  // namespace ddpx::text::bert
