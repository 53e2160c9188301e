// tiktoken's rank files (`gpt2.tiktoken`, `r50k_base.tiktoken`): one line per token, the token's
// bytes in standard base64, a space, and its rank; the rank is both the token's id and its merge
// priority (a lower rank merges first). This reader checks what tiktoken's load_tiktoken_bpe
// takes on trust: valid base64, ranks 0..N-1 each exactly once, no token twice, and the 256
// single bytes present (byte-level BPE must be able to spell any input).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddpx::io {

// Token bytes by rank: tokens[r] is the token whose id is r.
struct RankFile {
  std::vector<std::string> tokens;
};

// In-memory parser (also the fuzz entry point); `source` names the bytes in errors, which are
// one-line ddpx::Error(kData) naming the line at fault.
RankFile parse_rank_file(std::string_view bytes, const std::string& source);
// Reads `path`; a missing file is kData naming it and `ddpx data download gpt2-vocab`.
RankFile read_rank_file(const std::string& path);

}  // namespace ddpx::io
