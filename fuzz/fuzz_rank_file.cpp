// libFuzzer target: the tiktoken rank-file parser (base64 token + rank per line) on arbitrary
// bytes. Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/rank_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto file = ddpx::io::parse_rank_file(bytes, "fuzz");
    if (file.tokens.size() < 256) __builtin_trap();  // every single byte is a token
  } catch (const ddpx::Error&) {
  }
  return 0;
}
