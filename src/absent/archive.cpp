// Unpacking CIFAR's tar.gz in a -DDDPX_GPU_CHECK=ON build (see absent.h): no libarchive here.
#include "io/archive.h"

#include "absent/absent.h"

namespace ddpx::io {

void extract_archive(const std::string& archive_path, const std::string& dest_dir) {
  fail(ErrorKind::kUsage,
       "cannot unpack {}: this build (-DDDPX_GPU_CHECK=ON) has no libarchive; unpack it with "
       "`tar -xzf {} -C {}` and run again, or use a full build (scripts/build)",
       archive_path, archive_path, dest_dir);
}

void extract_archive_bytes(std::string_view, const std::string& source, const std::string&,
                           int64_t) {
  fail(ErrorKind::kUsage, "cannot unpack {}: this build (-DDDPX_GPU_CHECK=ON) has no libarchive",
       source);
}

}  // namespace ddpx::io
