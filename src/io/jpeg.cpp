#include "io/jpeg.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <vector>

#include "core/error.h"

namespace ddpx::io {
namespace jpeg_detail {

// A corrupt progressive file can hold scan after scan, each a pass over the whole image;
// libjpeg-turbo's own fuzzers stop at 500, and so does ddpx.
constexpr int kMaxScans = 500;

// libjpeg reports errors through these callbacks; error_exit must not return, so it longjmps to
// the setjmp in run(), which sits above libjpeg's C frames only. The message is kept here.
struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg casts cinfo->err to this
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the pixels are wrong (libjpeg would fill the rest with grey and go on) end
// the decode as errors; harmless ones (extraneous bytes, an unknown JFIF revision) are ignored.
void on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_MUST_RESYNC:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_ARITH_BAD_CODE:
      on_error(cinfo);
    default:
      return;
  }
}

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number <= kMaxScans) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof(err->message), "more than %d scans", kMaxScans);
  std::longjmp(err->jump, 1);
}

// The libjpeg object, destroyed on every way out (libjpeg frees what it allocated).
struct Decoder {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  jpeg_progress_mgr progress{};
  Decoder() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    progress.progress_monitor = on_progress;
  }
  ~Decoder() { jpeg_destroy_decompress(&cinfo); }
};

// PIL's CMYK -> RGB (Convert.c's cmyk2rgb) on the samples as stored: Adobe's files (every one
// libjpeg or PIL writes) keep CMYK inverted, which PIL undoes first ("CMYK;I").
void cmyk_row_to_rgb(const uint8_t* in, uint8_t* out, int64_t width, bool inverted) {
  for (int64_t x = 0; x < width; ++x, in += 4, out += 3) {
    const int k = inverted ? in[3] : 255 - in[3];  // PIL's nk = 255 - K
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? 255 - in[c] : in[c];
      int t = v * k + 128;
      t = ((t >> 8) + t) >> 8;
      out[c] = static_cast<uint8_t>(std::clamp(k - t, 0, 255));
    }
  }
}

struct Output {
  ImageInfo info;
  torch::Tensor image;
  std::vector<uint8_t> cmyk_row;
};

// Reads the header (and, unless header_only, the pixels) into `out`. False when libjpeg failed,
// with dec.err.message set. Nothing with a destructor lives in this frame: a longjmp only skips
// libjpeg's frames. ddpx::Errors (the pixel limit) leave as exceptions; ~Decoder cleans up.
bool run(Decoder& dec, std::string_view bytes, const std::string& source, int64_t max_pixels,
         bool header_only, Output& out) {
  if (setjmp(dec.err.jump)) return false;
  jpeg_create_decompress(&dec.cinfo);
  dec.cinfo.progress = &dec.progress;
  jpeg_mem_src(&dec.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&dec.cinfo, TRUE);
  j_decompress_ptr cinfo = &dec.cinfo;
  out.info = {ImageFormat::kJpeg, cinfo->image_height, cinfo->image_width};
  check_image_size(out.info.height, out.info.width, max_pixels, source, "JPEG");
  if (header_only) return true;
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg turns YCCK into CMYK
  jpeg_start_decompress(cinfo);
  const int64_t h = cinfo->output_height, w = cinfo->output_width;
  out.image = torch::empty({h, w, 3}, torch::kUInt8);
  if (cmyk) out.cmyk_row.resize(w * 4);
  uint8_t* pixels = out.image.data_ptr<uint8_t>();
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* rgb = pixels + static_cast<int64_t>(cinfo->output_scanline) * w * 3;
    JSAMPROW row = cmyk ? out.cmyk_row.data() : rgb;
    jpeg_read_scanlines(cinfo, &row, 1);
    if (cmyk) cmyk_row_to_rgb(out.cmyk_row.data(), rgb, w, cinfo->saw_Adobe_marker);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

Output decode(std::string_view bytes, const std::string& source, int64_t max_pixels,
              bool header_only) {
  Decoder dec;
  Output out;
  if (!run(dec, bytes, source, max_pixels, header_only, out))
    fail(ErrorKind::kData, "{}: corrupt or truncated JPEG ({}); re-encode the file or remove it",
         source, dec.err.message);
  return out;
}

}  // namespace jpeg_detail

ImageInfo read_jpeg_info(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  return jpeg_detail::decode(bytes, source, max_pixels, true).info;
}

torch::Tensor decode_jpeg(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  return jpeg_detail::decode(bytes, source, max_pixels, false).image;
}

}  // namespace ddpx::io
