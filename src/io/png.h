// PNG through libpng: palette, gray (1-16 bits), gray+alpha, RGB, RGBA, 8 or 16 bits, interlaced
// or not, all to 8-bit RGB as PIL's convert("RGB") does: alpha and transparency dropped (not
// composited), palette expanded, 16-bit samples to their high byte, no gamma applied. libpng's
// errors longjmp back here and become one ddpx::Error(kData), as do a bad CRC and a truncated
// stream.
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>

#include "io/image.h"

namespace ddpx::io {

ImageInfo read_png_info(std::string_view bytes, const std::string& source, int64_t max_pixels);
torch::Tensor decode_png(std::string_view bytes, const std::string& source, int64_t max_pixels);

}  // namespace ddpx::io
