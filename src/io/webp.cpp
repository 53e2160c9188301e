#include "io/webp.h"

#include <webp/decode.h>

#include "core/error.h"

namespace ddpx::io {
namespace webp_detail {

const char* what(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "not enough data: the file is cut short";
    default:
      return "decoding failed";
  }
}

WebPBitstreamFeatures features(std::string_view bytes, const std::string& source,
                               int64_t max_pixels) {
  WebPBitstreamFeatures f{};
  const VP8StatusCode status =
      WebPGetFeatures(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &f);
  DDPX_CHECK(status == VP8_STATUS_OK, ErrorKind::kData,
             "{}: corrupt or truncated WebP ({}); re-encode the file or remove it", source,
             what(status));
  DDPX_CHECK(!f.has_animation, ErrorKind::kData,
             "{}: an animated WebP, which ddpx does not decode; keep one frame (e.g. `convert "
             "'FILE[0]' FILE.png`) or remove it",
             source);
  check_image_size(f.height, f.width, max_pixels, source, "WebP");
  return f;
}

}  // namespace webp_detail

bool webp_available() { return true; }

ImageInfo read_webp_info(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  const WebPBitstreamFeatures f = webp_detail::features(bytes, source, max_pixels);
  return {ImageFormat::kWebp, f.height, f.width};
}

torch::Tensor decode_webp(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  const WebPBitstreamFeatures f = webp_detail::features(bytes, source, max_pixels);
  // image: (H, W, 3) uint8, written by libwebp in place
  auto image = torch::empty({f.height, f.width, 3}, torch::kUInt8);
  const size_t stride = static_cast<size_t>(f.width) * 3;
  const uint8_t* done = WebPDecodeRGBInto(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), image.data_ptr<uint8_t>(),
      stride * static_cast<size_t>(f.height), static_cast<int>(stride));
  DDPX_CHECK(done != nullptr, ErrorKind::kData,
             "{}: corrupt or truncated WebP (its data does not decode); re-encode the file or "
             "remove it",
             source);
  return image;
}

}  // namespace ddpx::io
