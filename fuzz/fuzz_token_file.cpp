// libFuzzer target: the token-file parser (llm.c's header, and headerless uint16) on arbitrary
// bytes. Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool headerless : {false, true}) {
    try {
      ddpx::io::TokenFileInfo info;
      auto tokens = ddpx::io::parse_token_file(bytes, "fuzz", headerless, &info);
      if (tokens.numel() != info.num_tokens) __builtin_trap();
    } catch (const ddpx::Error&) {
    }
  }
  return 0;
}
