// Image files: the format told by the first bytes (never the extension), the size read from the
// header alone, and the whole decode to 8-bit RGB (H, W, 3), dispatched to io/jpeg, io/png or
// io/webp.
// A header whose pixel count passes `max_pixels` is refused before any pixel buffer exists (a
// 100000x100000 header costs nothing). Every failure (truncated, corrupt, empty, not an image,
// too large) is one ddpx::Error(kData) line naming `source`.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/names.h"

namespace ddpx::io {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp, kGif, kBmp, kTiff, kPnm };
inline constexpr NameTable<ImageFormat, 8> kImageFormatNames{{{ImageFormat::kUnknown, "unknown"},
                                                              {ImageFormat::kJpeg, "jpeg"},
                                                              {ImageFormat::kPng, "png"},
                                                              {ImageFormat::kWebp, "webp"},
                                                              {ImageFormat::kGif, "gif"},
                                                              {ImageFormat::kBmp, "bmp"},
                                                              {ImageFormat::kTiff, "tiff"},
                                                              {ImageFormat::kPnm, "pnm"}}};
inline const char* name(ImageFormat f) { return name_of(kImageFormatNames, f); }

// PIL refuses images over twice its MAX_IMAGE_PIXELS (a decompression bomb); so does ddpx.
inline constexpr int64_t kMaxImagePixels = 2 * 89478485;

// Enough of a file's start for the header of nearly every JPEG and PNG (EXIF blocks included).
inline constexpr size_t kImageHeaderBytes = 64 * 1024;

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t height = 0;
  int64_t width = 0;
};

// The format from the magic bytes; kUnknown when they match none.
ImageFormat detect_image_format(std::string_view bytes);

// The header only (format and size; the pixel limit applied). `bytes` may be the file's start.
ImageInfo read_image_info(std::string_view bytes, const std::string& source,
                          int64_t max_pixels = kMaxImagePixels);

// A crop to decode, in the full image's pixels, and the down-scaling (1, 2, 4 or 8) the caller
// accepts. A JPEG decodes only the crop, at 1/scale, its sides scaled and rounded to whole
// pixels: rows round(top / scale) to round((top + height) / scale), columns alike (at least
// one of each). Other formats decode whole and are cropped, at scale 1.
struct ImageRegion {
  int64_t top = 0, left = 0, height = 0, width = 0;
  int scale = 1;
};

// The decoded crop: (h, w, 3) uint8 RGB and the scale it came at.
struct DecodedRegion {
  torch::Tensor pixels;
  int scale = 1;
};

// `region` (inside the image) of the image in `bytes`, as decode_image checks and fails.
DecodedRegion decode_image_region(std::string_view bytes, const std::string& source,
                                  const ImageRegion& region, int64_t max_pixels = kMaxImagePixels);

// The whole image as (H, W, 3) uint8, RGB. JPEG, PNG and WebP (where the build has libwebp:
// io/webp.h); other formats are refused with a line saying to convert them.
torch::Tensor decode_image(std::string_view bytes, const std::string& source,
                           int64_t max_pixels = kMaxImagePixels);

// The image file at `path` (read whole, then decode_image).
torch::Tensor read_image(const std::string& path, int64_t max_pixels = kMaxImagePixels);

// Refuses a header's size over the limit (shared by the decoders).
void check_image_size(int64_t height, int64_t width, int64_t max_pixels, const std::string& source,
                      const char* format);

}  // namespace ddpx::io
