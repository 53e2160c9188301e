// JPEG through libjpeg-turbo: baseline, progressive, any chroma subsampling, grayscale, CMYK and
// YCCK, all to 8-bit RGB with libjpeg's defaults (ISLOW IDCT, fancy upsampling), as PIL decodes
// them, so pixels match PIL built on libjpeg-turbo. CMYK becomes RGB by PIL's formula (Adobe's
// inverted CMYK as PIL reads it). EXIF orientation is ignored, as torchvision's ImageFolder does.
// libjpeg's errors longjmp back here and become one ddpx::Error(kData); a premature end of data
// (a truncated file) is an error, not a grey bottom as libjpeg's warning would leave it.
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>

#include "io/image.h"

namespace ddpx::io {

ImageInfo read_jpeg_info(std::string_view bytes, const std::string& source, int64_t max_pixels);
torch::Tensor decode_jpeg(std::string_view bytes, const std::string& source, int64_t max_pixels);
// Only `region` (image.h), at 1/region.scale: libjpeg-turbo's DCT scaling, jpeg_crop_scanline for
// the columns and jpeg_skip_scanlines for the rows above (entropy-decoded, not transformed); the
// rows below are left undecoded when the file ends with its EOI marker (else read, so that a cut
// file still fails).
torch::Tensor decode_jpeg_region(std::string_view bytes, const std::string& source,
                                 const ImageRegion& region, int64_t max_pixels);

}  // namespace ddpx::io
