// libFuzzer target: the JPEG decoder (libjpeg-turbo behind io/jpeg), its region decode (the
// fast mode's) and the header reader on arbitrary bytes. Any ddpx::Error is a correct rejection; a
// crash, leak, sanitizer report, hang or exit() from inside libjpeg is a bug. The pixel limit is
// lowered to 4 MP so that a header's honest claim cannot outgrow the fuzzer's memory limit. Seeds:
// fuzz/make_image_seeds.py (generated in build-fuzz/seeds by fuzz/check.sh; nothing committed).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/image.h"
#include "io/jpeg.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxPixels = int64_t{1} << 22;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddpx::io::read_jpeg_info(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::decode_jpeg(bytes, "fuzz", kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  // The fast mode's path: a crop of the lower right quarter at 1/2 (DCT scaling, cropped
  // scanlines, skipped rows), sized from the header as the loader does.
  try {
    const ddpx::io::ImageInfo info = ddpx::io::read_jpeg_info(bytes, "fuzz", kMaxPixels);
    const ddpx::io::ImageRegion region{info.height / 2, info.width / 2,
                                       info.height - info.height / 2, info.width - info.width / 2,
                                       2};
    ddpx::io::decode_jpeg_region(bytes, "fuzz", region, kMaxPixels);
  } catch (const ddpx::Error&) {
  }
  return 0;
}
