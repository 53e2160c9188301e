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

}  // namespace ddpx::io
