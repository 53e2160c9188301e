#include "io/png.h"

#include <png.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace ddpx::io {
namespace png_detail {

// libpng reports errors through error_fn, which must not return: it keeps the message and
// longjmps to the setjmp in run(), above libpng's C frames only.
struct Reader {
  std::string_view bytes;
  size_t offset = 0;
  char message[256] = {};
};

void on_error(png_structp png, png_const_charp message) {
  auto* reader = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof(reader->message), "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // ancillary trouble; the pixels stand

void on_read(png_structp png, png_bytep data, png_size_t length) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (length > reader->bytes.size() - reader->offset) png_error(png, "file is truncated");
  std::memcpy(data, reader->bytes.data() + reader->offset, length);
  reader->offset += length;
}

// The libpng objects, destroyed on every way out.
struct Decoder {
  png_structp png = nullptr;
  png_infop info = nullptr;
  Reader reader;
  ~Decoder() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct Output {
  ImageInfo info;
  torch::Tensor image;
  std::vector<png_bytep> rows;
};

// Reads the header (and, unless header_only, the pixels) into `out`; false when libpng failed,
// with the message in dec.reader. Nothing with a destructor lives in this frame: a longjmp only
// skips libpng's frames. ddpx::Errors (the pixel limit) leave as exceptions.
bool run(Decoder& dec, const std::string& source, int64_t max_pixels, bool header_only,
         Output& out) {
  dec.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &dec.reader, on_error, on_warning);
  if (!dec.png) {
    std::snprintf(dec.reader.message, sizeof(dec.reader.message), "out of memory");
    return false;
  }
  dec.info = png_create_info_struct(dec.png);
  if (!dec.info) {
    std::snprintf(dec.reader.message, sizeof(dec.reader.message), "out of memory");
    return false;
  }
  png_structp png = dec.png;
  png_infop info = dec.info;
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &dec.reader, on_read);
  png_read_info(png, info);
  out.info = {ImageFormat::kPng, png_get_image_height(png, info), png_get_image_width(png, info)};
  check_image_size(out.info.height, out.info.width, max_pixels, source, "PNG");
  if (header_only) return true;
  // To 8-bit RGB as PIL's convert("RGB"): expand palette and low-bit gray, high byte of 16-bit
  // samples, gray to RGB, alpha (and transparency) dropped.
  const int color_type = png_get_color_type(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8) {
    std::snprintf(dec.reader.message, sizeof(dec.reader.message),
                  "%d channels of %d bits after conversion, expected 3 of 8",
                  png_get_channels(png, info), png_get_bit_depth(png, info));
    return false;
  }
  const int64_t h = out.info.height, w = out.info.width;
  out.image = torch::empty({h, w, 3}, torch::kUInt8);
  out.rows.resize(h);
  for (int64_t y = 0; y < h; ++y) out.rows[y] = out.image.data_ptr<uint8_t>() + y * w * 3;
  png_read_image(png, out.rows.data());
  png_read_end(png, nullptr);
  return true;
}

Output decode(std::string_view bytes, const std::string& source, int64_t max_pixels,
              bool header_only) {
  Decoder dec;
  dec.reader.bytes = bytes;
  Output out;
  if (!run(dec, source, max_pixels, header_only, out))
    fail(ErrorKind::kData, "{}: corrupt or truncated PNG ({}); re-encode the file or remove it",
         source, dec.reader.message);
  return out;
}

}  // namespace png_detail

ImageInfo read_png_info(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  return png_detail::decode(bytes, source, max_pixels, true).info;
}

torch::Tensor decode_png(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  return png_detail::decode(bytes, source, max_pixels, false).image;
}

}  // namespace ddpx::io
