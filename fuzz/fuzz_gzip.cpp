// libFuzzer target: gunzip (io/gzip.h) on arbitrary bytes, concatenated members included, with
// a small output cap so that each run stays fast. A ddpx::Error is a correct rejection; a
// crash, leak, sanitizer report or an output past the cap is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/gzip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kCap = 1 << 24;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (ddpx::io::gunzip(bytes, "fuzz", kCap).size() > static_cast<size_t>(kCap)) std::abort();
  } catch (const ddpx::Error&) {
  }
  return 0;
}
