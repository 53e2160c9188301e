// libFuzzer target: a tar shard's index (io/tar_index.h, `SHARD.tar.idx` beside each packed
// shard) from bytes, for a tar of 1 MiB. Refusing (nullopt) is correct; a crash, leak, sanitizer
// report or hang is a bug, and so is an accepted member whose data lies outside the tar or whose
// inline bytes are not its size (the shard reader would pread or parse them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/tar_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kTarBytes = 1 << 20;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto members = ddpx::io::parse_tar_index(text, kTarBytes)) {
    for (const auto& m : *members) {
      if (m.offset < 0 || m.size < 0 || m.offset + m.size > kTarBytes || m.name.empty())
        std::abort();
      if (m.size <= ddpx::io::kTarInlineBytes && m.data.size() != static_cast<size_t>(m.size))
        std::abort();
    }
  }
  return 0;
}
