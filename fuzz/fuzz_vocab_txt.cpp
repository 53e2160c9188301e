// libFuzzer target: the BERT vocab.txt parser (one WordPiece token per line) and the tokenizer
// built on it, on arbitrary bytes. Any ddpx::Error is a correct rejection; a crash, leak or
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "text/vocab_txt.h"
#include "text/wordpiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto vocab = ddpx::text::parse_vocab_txt(bytes, "fuzz");
    if (vocab.tokens.empty()) __builtin_trap();  // an empty file is refused
    ddpx::text::WordPieceTokenizer tokenizer(std::move(vocab), true, "fuzz");
    // The vocabulary's own bytes as text: every id it gives is in the vocabulary.
    for (uint32_t id : tokenizer.encode(bytes))
      if (id >= tokenizer.vocab_size()) __builtin_trap();
  } catch (const ddpx::Error&) {
  }
  return 0;
}
