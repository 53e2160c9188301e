// Token files: llm.c's format (a 256 x int32 little-endian header: magic, version, token count;
// then the tokens), which `ddpx data tokenize` writes and language-model training reads, and the
// headerless uint16 files that nanoGPT's and llm.c's older prepare scripts write. Every size is
// checked against the header before a token is read.
// llm.c's writer (dev/data/data_common.py, write_datafile) has two descriptors: "gpt-2" (magic
// 20240520, version 1, uint16 tokens) and "llama-3" (magic 20240801, version 7, uint32 tokens).
// Both magics are read, the version alone deciding the token width; uint32 files are written
// with llama-3's magic, as llm.c writes them, so that llm.c reads ddpx's files too.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddpx::io {

constexpr int32_t kTokenFileMagic = 20240520;        // llm.c's "gpt-2" files
constexpr int32_t kTokenFileMagicUint32 = 20240801;  // llm.c's "llama-3" files
constexpr int64_t kTokenFileHeaderInts = 256;
constexpr int64_t kTokenFileHeaderBytes = kTokenFileHeaderInts * 4;

// llm.c's token file (a 256 x int32 header: magic 20240520, version 1 = uint16 tokens or
// 7 = uint32 tokens, token count; then the tokens), or a headerless uint16 file (nanoGPT's and
// llm.c's older prepare scripts) when `headerless` is set.
struct TokenFileInfo {
  int version = 0;  // 1, 7, or 0 for headerless
  int64_t num_tokens = 0;
};

// All tokens as a 1-D int32 tensor (CPU). Throws ddpx::Error (kind data) naming the file and what
// is wrong: missing, wrong magic/version, a count that disagrees with the length, odd length.
// The file is memory-mapped, so the only copy is the int32 tensor.
torch::Tensor read_token_file(const std::string& path, bool headerless = false,
                              TokenFileInfo* info = nullptr);

// The same on bytes in memory (also the fuzz entry point); `source` names them in errors.
torch::Tensor parse_token_file(std::string_view bytes, const std::string& source,
                               bool headerless = false, TokenFileInfo* info = nullptr);

// Writes `tokens` atomically (core/atomic_file.h) in llm.c's format: version 1 when every token
// is below 65536, else version 7 (with magic 20240801, as llm.c writes uint32 files).
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace ddpx::io
