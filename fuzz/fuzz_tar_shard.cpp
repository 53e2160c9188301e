// libFuzzer target: listing a tar shard (io/tar_shard.h, libarchive's tar reader underneath)
// from bytes. A ddpx::Error is a correct rejection; a crash, leak, sanitizer report or hang is a
// bug, and so is a listed member whose data lies outside the input (the reader would pread it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/tar_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& m : ddpx::io::list_tar_bytes(bytes, "fuzz")) {
      if (m.offset < 0 || m.size < 0 || m.offset + m.size > static_cast<int64_t>(size))
        std::abort();
      if (m.size <= ddpx::io::kTarInlineBytes && (m.data.size() != static_cast<size_t>(m.size) ||
                                                  bytes.substr(m.offset, m.size) != m.data))
        std::abort();
    }
  } catch (const ddpx::Error&) {
  }
  return 0;
}
