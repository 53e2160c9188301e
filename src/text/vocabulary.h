// The tokenizer a user names with `--vocab` to turn a prompt into tokens and a model's tokens
// back into text (`ddpx generate`): whichever of ddpx's two tokenizers the file describes.
//   - a vocab.json of `ddpx data tokenize --tokenizer char`: the characters
//   (text/char_tokenizer.h);
//   - a vocab.json of `ddpx data tokenize --tokenizer gpt2`: GPT-2's BPE over the rank file it
//     names (its "rank_file"; a relative path is taken from the vocab.json's folder);
//   - a tiktoken rank file itself (gpt2.tiktoken, r50k_base.tiktoken): GPT-2's BPE (text/bpe.h);
//   - Hugging Face's GPT-2 tokenizer files (text/hf_bpe.h): a folder with vocab.json and
//     merges.txt, or that vocab.json.
// A file that opens with '{' is read as a vocab.json, anything else as a rank file; errors are
// the readers' one-line kData naming the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe.h"
#include "text/char_tokenizer.h"

namespace ddpx::text {

class Vocabulary {
 public:
  static Vocabulary load(const std::string& path);

  // The tokens of `text` (`source` names it in errors: a character a char vocabulary lacks).
  // GPT-2's: encode_ordinary (<|endoftext|> in the text is text).
  std::vector<uint32_t> encode(std::string_view text, const std::string& source) const;
  // The text of `tokens`; a token past the vocabulary is kData naming the file.
  std::string decode(const std::vector<uint32_t>& tokens) const;

  int64_t vocab_size() const;
  // GPT-2's <|endoftext|>, which starts a text when the prompt is empty; none for characters.
  std::optional<uint32_t> end_of_text() const;
  const char* kind() const { return bpe_ ? "gpt2" : "char"; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<CharTokenizer> chars_;
  std::optional<BpeTokenizer> bpe_;
};

}  // namespace ddpx::text
