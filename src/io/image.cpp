#include "io/image.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/jpeg.h"
#include "io/png.h"
#include "io/webp.h"

namespace ddpx::io {
namespace image_detail {

bool starts_with(std::string_view bytes, std::string_view magic) {
  return bytes.size() >= magic.size() && bytes.compare(0, magic.size(), magic) == 0;
}

[[noreturn]] void refuse(std::string_view bytes, const std::string& source) {
  const ImageFormat format = detect_image_format(bytes);
  if (bytes.empty())
    fail(ErrorKind::kData, "{}: empty file (0 bytes); expected a JPEG, PNG or WebP image", source);
  if (format == ImageFormat::kUnknown)
    fail(
        ErrorKind::kData,
        "{}: not a JPEG, PNG or WebP image (its first bytes match no image format); remove it from "
        "the folder or convert it",
        source);
  fail(ErrorKind::kData,
       "{}: a {} image, which ddpx does not decode (JPEG, PNG and WebP only); convert it, e.g. "
       "`convert FILE FILE.png`, or remove it",
       source, name(format));
}

}  // namespace image_detail

ImageFormat detect_image_format(std::string_view bytes) {
  if (image_detail::starts_with(bytes, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (image_detail::starts_with(bytes, "\x89PNG\r\n\x1A\n")) return ImageFormat::kPng;
  if (image_detail::starts_with(bytes, "RIFF") && bytes.size() >= 12 &&
      bytes.substr(8, 4) == "WEBP")
    return ImageFormat::kWebp;
  if (image_detail::starts_with(bytes, "GIF87a") || image_detail::starts_with(bytes, "GIF89a"))
    return ImageFormat::kGif;
  if (image_detail::starts_with(bytes, "BM")) return ImageFormat::kBmp;
  if (image_detail::starts_with(bytes, std::string_view("II*\0", 4)) ||
      image_detail::starts_with(bytes, std::string_view("MM\0*", 4)))
    return ImageFormat::kTiff;
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '6')
    return ImageFormat::kPnm;
  return ImageFormat::kUnknown;
}

void check_image_size(int64_t height, int64_t width, int64_t max_pixels, const std::string& source,
                      const char* format) {
  DDPX_CHECK(height > 0 && width > 0, ErrorKind::kData, "{}: {} header gives a {}x{} image", source,
             format, width, height);
  // Both sides are below 2^32 in either format, so the product fits in 64 bits.
  DDPX_CHECK(height * width <= max_pixels, ErrorKind::kData,
             "{}: {} header claims {}x{} = {} pixels, over the limit of {} (a decompression bomb "
             "or a corrupt header); shrink the image or remove it",
             source, format, width, height, height * width, max_pixels);
}

ImageInfo read_image_info(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  switch (detect_image_format(bytes)) {
    case ImageFormat::kJpeg:
      return read_jpeg_info(bytes, source, max_pixels);
    case ImageFormat::kPng:
      return read_png_info(bytes, source, max_pixels);
    case ImageFormat::kWebp:
      return read_webp_info(bytes, source, max_pixels);
    default:
      image_detail::refuse(bytes, source);
  }
}

torch::Tensor decode_image(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  switch (detect_image_format(bytes)) {
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, source, max_pixels);
    case ImageFormat::kPng:
      return decode_png(bytes, source, max_pixels);
    case ImageFormat::kWebp:
      return decode_webp(bytes, source, max_pixels);
    default:
      image_detail::refuse(bytes, source);
  }
}

DecodedRegion decode_image_region(std::string_view bytes, const std::string& source,
                                  const ImageRegion& region, int64_t max_pixels) {
  if (detect_image_format(bytes) == ImageFormat::kJpeg)
    return {decode_jpeg_region(bytes, source, region, max_pixels), region.scale};
  const torch::Tensor image = decode_image(bytes, source, max_pixels);
  DDPX_CHECK(region.top >= 0 && region.left >= 0 && region.height > 0 && region.width > 0 &&
                 region.top + region.height <= image.size(0) &&
                 region.left + region.width <= image.size(1),
             ErrorKind::kInternal, "{}: region {}x{} at ({}, {}) outside the {}x{} image", source,
             region.width, region.height, region.left, region.top, image.size(1), image.size(0));
  return {image.slice(0, region.top, region.top + region.height)
              .slice(1, region.left, region.left + region.width),
          1};
}

torch::Tensor read_image(const std::string& path, int64_t max_pixels) {
  const std::string bytes = read_file(path);
  return decode_image(bytes, path, max_pixels);
}

}  // namespace ddpx::io
