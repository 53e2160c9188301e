// The JPEG and PNG decoders in a -DDDPX_GPU_CHECK=ON build whose machine lacks libjpeg or libpng
// (see absent.h): image folders are refused with one line.
#include "absent/absent.h"
#include "io/jpeg.h"
#include "io/png.h"

namespace ddpx::io {
namespace {

[[noreturn]] void no_decoder(const std::string& source) {
  absent::not_built(("decoding " + source).c_str(),
                    "install libjpeg62-turbo-dev and libpng-dev and build again");
}

}  // namespace

ImageInfo read_jpeg_info(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}
torch::Tensor decode_jpeg(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}
torch::Tensor decode_jpeg_region(std::string_view, const std::string& source, const ImageRegion&,
                                 int64_t) {
  no_decoder(source);
}
ImageInfo read_png_info(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}
torch::Tensor decode_png(std::string_view, const std::string& source, int64_t) {
  no_decoder(source);
}

}  // namespace ddpx::io
