#include "io/gzip.h"

#include <zlib.h>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ddpx::io {

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x1f &&
         static_cast<uint8_t>(bytes[1]) == 0x8b;
}

std::string gunzip(std::string_view bytes, const std::string& source, int64_t max_bytes) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (CRC and length are checked by zlib).
  DDPX_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, ErrorKind::kInternal,
             "zlib inflateInit2 failed for {}", source);
  std::string out;
  char buffer[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  int rc = Z_OK;
  while (true) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof(buffer);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - zs.avail_out);
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      inflateEnd(&zs);
      fail(ErrorKind::kData, "{}: inflates to more than {} bytes; expected a dataset file", source,
           max_bytes);
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another gzip member follows (gzip allows concatenation).
      if (inflateReset(&zs) != Z_OK) break;
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      fail(ErrorKind::kData,
           "{}: the gzip stream is truncated; delete the file and download it "
           "again",
           source);
    }
    if (rc != Z_OK) {
      std::string msg = zs.msg ? zs.msg : "unknown error";
      inflateEnd(&zs);
      fail(ErrorKind::kData, "{}: corrupt gzip data ({}); delete the file and download it again",
           source, msg);
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string read_maybe_gzip(const std::string& path) {
  std::string bytes = read_file(path);
  if (is_gzip(bytes)) return gunzip(bytes, path);
  return bytes;
}

}  // namespace ddpx::io
