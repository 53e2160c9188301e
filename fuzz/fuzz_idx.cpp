// libFuzzer target: the IDX parsers (and gunzip in front of them) on arbitrary bytes.
// Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/gzip.h"
#include "io/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddpx::io::parse_idx_images(bytes, "fuzz");
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::parse_idx_labels(bytes, "fuzz", 10);
  } catch (const ddpx::Error&) {
  }
  try {
    if (ddpx::io::is_gzip(bytes)) ddpx::io::gunzip(bytes, "fuzz", 1 << 24);
  } catch (const ddpx::Error&) {
  }
  return 0;
}
