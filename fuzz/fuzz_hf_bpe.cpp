// libFuzzer target: Hugging Face's GPT-2 tokenizer files (text/hf_bpe.h) on arbitrary bytes: the
// input up to its first NUL as vocab.json and the rest as merges.txt, and the whole input as a
// tokenizer.json.
// Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "text/hf_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t nul = bytes.find('\0');
  std::string_view vocab = bytes.substr(0, nul);
  std::string_view merges = nul == bytes.npos ? std::string_view() : bytes.substr(nul + 1);
  try {
    auto ranks = ddpx::text::parse_hf_bpe(vocab, merges, "fuzz");
    if (ranks.tokens.size() < 256) __builtin_trap();  // every single byte is a token
  } catch (const ddpx::Error&) {
  }
  try {
    auto ranks = ddpx::text::parse_hf_tokenizer_json(bytes, "fuzz");
    if (ranks.tokens.size() < 256) __builtin_trap();
  } catch (const ddpx::Error&) {
  }
  return 0;
}
