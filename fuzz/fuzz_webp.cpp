// libFuzzer target: the WebP decoder (libwebp behind io/webp, or its stand-in in a build without
// libwebp) and io/image's dispatch to it, on arbitrary bytes. Any ddpx::Error is a correct
// rejection; a crash, leak, sanitizer report or hang is a bug. The pixel limit is lowered to
// 4 MP so that a header's honest claim cannot outgrow the fuzzer's memory limit. Seeds:
// fuzz/make_image_seeds.py (generated in build-fuzz/seeds by fuzz/check.sh).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/image.h"
#include "io/webp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxPixels = int64_t{1} << 22;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddpx::io::read_webp_info(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::decode_webp(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  try {
    // The fast mode's path: a region of whatever the header says, as the loader asks for one.
    const ddpx::io::ImageInfo info = ddpx::io::read_image_info(bytes, "fuzz", kMaxPixels);
    ddpx::io::decode_image_region(bytes, "fuzz", {0, 0, info.height, info.width, 1}, kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  return 0;
}
