// WebP in a build configured without libwebp (its -dev package, an optional dependency:
// cmake/dependencies.cmake): a WebP file is refused with one line saying how to get the decoder.
#include "io/webp.h"

#include "core/error.h"

namespace ddpx::io {
namespace {

[[noreturn]] void no_decoder(const std::string& source) {
  fail(ErrorKind::kData,
       "{}: a WebP image, and this build has no WebP decoder (libwebp-dev was not installed when "
       "it was configured); install libwebp-dev (scripts/bootstrap does) and build again, or "
       "convert the file to PNG or JPEG",
       source);
}

}  // namespace

bool webp_available() { return false; }
ImageInfo read_webp_info(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}
torch::Tensor decode_webp(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}

}  // namespace ddpx::io
