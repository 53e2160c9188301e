// BERT's vocabulary file (`vocab.txt` of bert-base-uncased and every WordPiece model): one token
// per line, its id the line's index from 0; "##" opens a word-continuation piece, "[UNK]",
// "[CLS]", "[SEP]", "[MASK]" and "[PAD]" are the special tokens. Lines end with "\n" or "\r\n"
// (transformers' load_vocab reads the file in text mode and strips the newline only, so other
// white space stays part of the token); a last line without a newline is a token too.
// Refused, with one line naming the file and line: an empty file, text that is not UTF-8, a
// token on two lines (its id would be ambiguous), more than 2^31 - 1 tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddpx::text {

struct VocabTxt {
  std::vector<std::string> tokens;  // tokens[id]
};

// In-memory parser (also the fuzz entry point); `source` names the bytes in errors (kData).
VocabTxt parse_vocab_txt(std::string_view bytes, const std::string& source);
// Reads `path`; a missing file is kData naming it.
VocabTxt read_vocab_txt(const std::string& path);

}  // namespace ddpx::text
