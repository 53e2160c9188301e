// GPT-2's tokenizer as Hugging Face saves it: `vocab.json` (token -> id) and `merges.txt` (the
// merges in priority order, after a "#version" line), as the tokenizers library's BPE.save and
// every GPT-2 folder on the Hub hold it, or `tokenizer.json` (the same vocabulary and merges under
// "model", <|endoftext|> among "added_tokens"), all that transformers 5's save_pretrained writes.
// Read into the rank
// table of a tiktoken rank file (io/rank_file.h): a token's id is its rank, which is what
// tiktoken's own conversion (data_gym_to_mergeable_bpe_ranks) and transformers'
// TikTokenConverter rely on. merges.txt checks it: every merge makes a token of vocab.json, the
// merges come in the order of the ids they make (so an id is the token's merge priority), and
// every token longer than a byte is made by one. vocab.json's one further entry may be
// <|endoftext|>, at the id after the others (GPT-2's 50256).
// Refused with one line naming the file (kData): JSON that is not an object of token -> id (or a
// tokenizer.json whose model is not BPE), ids
// that are not 0..N-1 each once, a token not spelled in GPT-2's byte alphabet (bytes_to_unicode),
// a single byte missing, a merge line that is not two tokens or makes a token vocab.json lacks,
// merges out of id order (a byte-level BPE such as RoBERTa's, whose ids are not its merge order),
// a token no merge makes.
#pragma once

#include <string>
#include <string_view>

#include "io/rank_file.h"

namespace ddpx::text {

// In-memory parser (also the fuzz entry point); `source` names the files in errors.
io::RankFile parse_hf_bpe(std::string_view vocab_json, std::string_view merges_txt,
                          const std::string& source);

// tokenizer.json's bytes (also a fuzz entry point).
io::RankFile parse_hf_tokenizer_json(std::string_view bytes, const std::string& source);

// `path`: a folder holding vocab.json and merges.txt (preferred) or tokenizer.json, a vocab.json
// with merges.txt beside it, or a tokenizer.json.
io::RankFile read_hf_bpe(const std::string& path);

// Whether `path` names Hugging Face's files as read_hf_bpe takes them.
bool is_hf_bpe(const std::string& path);

}  // namespace ddpx::text
