// `ddpx data tokenize`: text files -> train.bin and val.bin in llm.c's token-file format
// (io/token_file.h) and vocab.json beside them. Each input file is one document; with gpt2,
// <|endoftext|> precedes every document (llm.c's convention: a model sees where a document
// starts). The token stream's first (1 - val_fraction) goes to train.bin, the rest to val.bin
// (for char, nanoGPT's shakespeare_char split: data[:int(n * 0.9)]). With wordpiece (BERT,
// text/wordpiece.h) each document is [CLS] its tokens [SEP], so that masked-LM windows cut
// anywhere in the stream still see where documents meet; vocab.json records the vocab.txt, the
// casing and the special tokens' ids for training (a vocab.txt without [CLS] and [SEP] is
// refused).
//
// Parallel: each document is cut at GPT-2's split points (text/gpt2_pattern.h), at white space
// (wordpiece) or anywhere between characters (char) into chunks of about chunk_bytes, tokenized on
// `threads` threads and joined in order: the tokens are those of one thread, whatever the thread
// count.
//
// Bad input is refused before anything is written: a missing input or --vocab, a rank file or
// vocabulary that is not one, text that is not UTF-8 (gpt2: unless allow_invalid_utf8, then
// invalid bytes are byte tokens, text/bpe.h), a character the given char vocabulary lacks.
// Each file is written atomically, so a failure leaves the previous files as they were.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::text {

enum class TokenizerKind { kGpt2, kChar, kWordpiece };
inline constexpr NameTable<TokenizerKind, 3> kTokenizerNames{
    {{TokenizerKind::kGpt2, "gpt2"},
     {TokenizerKind::kChar, "char"},
     {TokenizerKind::kWordpiece, "wordpiece"}}};
inline const char* name(TokenizerKind kind) { return name_of(kTokenizerNames, kind); }

// Where `ddpx data download gpt2-vocab` puts GPT-2's rank file (tiktoken's r50k_base), the
// default --vocab of the gpt2 tokenizer.
inline constexpr const char* kDefaultGpt2Vocab = "data/gpt2-vocab/r50k_base.tiktoken";

struct TokenizeOptions {
  std::vector<std::string> inputs;  // text files, one document each
  TokenizerKind tokenizer = TokenizerKind::kGpt2;
  // gpt2: the tiktoken rank file (empty: kDefaultGpt2Vocab); char: an existing vocab.json to
  // tokenize with (empty: the inputs' own characters); wordpiece: BERT's vocab.txt (required).
  std::string vocab;
  bool cased = false;  // wordpiece: keep case and accents (a cased vocabulary: bert-base-cased)
  std::string out_dir;
  double val_fraction = 0.1;  // in [0, 1)
  int threads = 0;            // 0: one per core
  size_t chunk_bytes = 1 << 20;
  bool allow_invalid_utf8 = false;  // gpt2 only
};

struct TokenizeResult {
  int64_t input_bytes = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t vocab_size = 0;
  int threads = 1;
  double tokenize_seconds = 0;  // the tokenization alone: no reading, no writing
  std::vector<std::string> written;
};

TokenizeResult tokenize_files(const TokenizeOptions& options);

}  // namespace ddpx::text
