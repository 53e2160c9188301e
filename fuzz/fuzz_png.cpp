// libFuzzer target: the PNG decoder (libpng behind io/png), the format detection and dispatch
// of io/image, and the image index's cache parser on arbitrary bytes. Any ddpx::Error is a
// correct rejection; a crash, leak, sanitizer report or hang is a bug. The pixel limit is
// lowered to 4 MP so that a header's honest claim cannot outgrow the fuzzer's memory limit.
// Seeds: fuzz/make_image_seeds.py (generated in build-fuzz/seeds by fuzz/check.sh).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "data/image_index.h"
#include "io/image.h"
#include "io/png.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxPixels = int64_t{1} << 22;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddpx::io::read_png_info(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::decode_png(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::read_image_info(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  if (size >= 24) {
    uint64_t count = 0;
    for (int i = 0; i < 8; ++i) count |= uint64_t{data[16 + i]} << (8 * i);
    ddpx::data::parse_index_cache(bytes, count, 0, INT64_MIN);
  }
  return 0;
}
