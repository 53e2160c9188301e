#include "io/jpeg.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <tuple>
#include <utility>
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
  std::vector<uint8_t> row;  // one decoded row: CMYK, or a cropped row wider than the region
};

// What to decode: the whole image, or a region of it at 1/scale (image.h's ImageRegion).
struct Request {
  bool header_only = false;
  const ImageRegion* region = nullptr;
};

// A region's bounds at 1/scale: [begin, end) of `scaled` output pixels, never empty.
std::pair<int64_t, int64_t> scaled_span(int64_t begin, int64_t length, int scale, int64_t scaled) {
  const int64_t b = std::clamp<int64_t>((begin + scale / 2) / scale, 0, scaled - 1);
  const int64_t e = std::clamp<int64_t>((begin + length + scale / 2) / scale, b + 1, scaled);
  return {b, e};
}

// A complete JPEG ends with its EOI marker; a cut one (almost) never does.
bool ends_with_eoi(std::string_view bytes) {
  return bytes.size() >= 2 && bytes[bytes.size() - 2] == '\xFF' && bytes.back() == '\xD9';
}

// Reads the header (and, unless header_only, the pixels) into `out`. False when libjpeg failed,
// with dec.err.message set. Nothing with a destructor lives in this frame: a longjmp only skips
// libjpeg's frames. ddpx::Errors (the pixel limit) leave as exceptions; ~Decoder cleans up.
bool run(Decoder& dec, std::string_view bytes, const std::string& source, int64_t max_pixels,
         const Request& request, Output& out) {
  if (setjmp(dec.err.jump)) return false;
  jpeg_create_decompress(&dec.cinfo);
  dec.cinfo.progress = &dec.progress;
  jpeg_mem_src(&dec.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&dec.cinfo, TRUE);
  j_decompress_ptr cinfo = &dec.cinfo;
  out.info = {ImageFormat::kJpeg, cinfo->image_height, cinfo->image_width};
  check_image_size(out.info.height, out.info.width, max_pixels, source, "JPEG");
  if (request.header_only) return true;
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg turns YCCK into CMYK
  const ImageRegion* region = request.region;
  if (region) {
    cinfo->scale_num = 1;
    cinfo->scale_denom = static_cast<unsigned int>(region->scale);
  }
  jpeg_start_decompress(cinfo);
  const int64_t channels = cmyk ? 4 : 3;
  // Rows [y0, y1) and columns [x0, x1) of the (scaled) output.
  int64_t y0 = 0, y1 = cinfo->output_height, x0 = 0, x1 = cinfo->output_width;
  JDIMENSION crop_left = 0;  // where libjpeg's cropped rows start (x0 rounded down to an iMCU)
  if (region) {
    std::tie(y0, y1) = scaled_span(region->top, region->height, region->scale, y1);
    std::tie(x0, x1) = scaled_span(region->left, region->width, region->scale, x1);
    // One iMCU more on the right: the fancy chroma upsampling of the region's last columns reads
    // the samples beyond them, which libjpeg would otherwise replicate from the crop's edge.
    const int64_t imcu = cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size;
    const int64_t right = std::min<int64_t>(x1 + imcu, cinfo->output_width);
    JDIMENSION crop_width = static_cast<JDIMENSION>(right - x0);
    crop_left = static_cast<JDIMENSION>(x0);
    if (crop_width < cinfo->output_width) jpeg_crop_scanline(cinfo, &crop_left, &crop_width);
    if (y0 > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(y0));
  }
  const int64_t h = y1 - y0, w = x1 - x0, row_width = cinfo->output_width;
  out.image = torch::empty({h, w, 3}, torch::kUInt8);
  const bool direct = !cmyk && row_width == w;  // rows land in the image as they are
  if (!direct) out.row.resize(static_cast<size_t>(row_width * channels));
  uint8_t* pixels = out.image.data_ptr<uint8_t>();
  const int64_t skip = x0 - static_cast<int64_t>(crop_left);  // columns left of the region
  for (int64_t y = y0; y < y1; ++y) {
    uint8_t* rgb = pixels + (y - y0) * w * 3;
    JSAMPROW row = direct ? rgb : out.row.data();
    jpeg_read_scanlines(cinfo, &row, 1);
    if (cmyk)
      cmyk_row_to_rgb(out.row.data() + skip * 4, rgb, w, cinfo->saw_Adobe_marker);
    else if (!direct)
      std::memcpy(rgb, out.row.data() + skip * 3, static_cast<size_t>(w * 3));
  }
  if (region && cinfo->output_scanline < cinfo->output_height) {
    // The rows below the region are needed only to find a cut file (libjpeg's premature end
    // of data); a file that ends with its EOI marker is whole, so they are left undecoded.
    if (ends_with_eoi(bytes)) {
      jpeg_abort_decompress(cinfo);
      return true;
    }
    if (out.row.empty()) out.row.resize(static_cast<size_t>(row_width * channels));
    JSAMPROW row = out.row.data();
    while (cinfo->output_scanline < cinfo->output_height) jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

Output decode(std::string_view bytes, const std::string& source, int64_t max_pixels,
              const Request& request) {
  Decoder dec;
  Output out;
  if (!run(dec, bytes, source, max_pixels, request, out))
    fail(ErrorKind::kData, "{}: corrupt or truncated JPEG ({}); re-encode the file or remove it",
         source, dec.err.message);
  return out;
}

}  // namespace jpeg_detail

ImageInfo read_jpeg_info(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  jpeg_detail::Request request;
  request.header_only = true;
  return jpeg_detail::decode(bytes, source, max_pixels, request).info;
}

torch::Tensor decode_jpeg(std::string_view bytes, const std::string& source, int64_t max_pixels) {
  return jpeg_detail::decode(bytes, source, max_pixels, {}).image;
}

torch::Tensor decode_jpeg_region(std::string_view bytes, const std::string& source,
                                 const ImageRegion& region, int64_t max_pixels) {
  DDPX_CHECK(region.scale == 1 || region.scale == 2 || region.scale == 4 || region.scale == 8,
             ErrorKind::kInternal, "JPEG region scale 1/{}: expected 1, 2, 4 or 8", region.scale);
  jpeg_detail::Request request;
  request.region = &region;
  return jpeg_detail::decode(bytes, source, max_pixels, request).image;
}

}  // namespace ddpx::io
