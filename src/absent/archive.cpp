// Unpacking CIFAR's tar.gz in a -DDDPX_GPU_CHECK=ON build (see absent.h): no libarchive here.
#include "io/archive.h"

#include "absent/absent.h"

namespace ddpx::data {

void extract_archive(const std::string& archive_path, const std::string& dest_dir) {
  fail(ErrorKind::kUsage,
       "cannot unpack {}: this build (-DDDPX_GPU_CHECK=ON) has no libarchive; unpack it with "
       "`tar -xzf {} -C {}` and run again, or use a full build (scripts/build)",
       archive_path, archive_path, dest_dir);
}

}  // namespace ddpx::data
