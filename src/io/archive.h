// Unpacking the official dataset archives (tar.gz) with libarchive. Only regular files and
// directories are written; absolute paths, `..` components, links and devices are refused, so
// an archive cannot write outside the destination.
#pragma once

#include <string>

namespace ddpx::io {

// Unpacks `archive_path` into `dest_dir`. Entries land in a hidden staging folder first and
// are moved into place only when the whole archive was read, so a corrupt archive leaves no
// half-extracted dataset behind. Existing top-level entries are replaced.
void extract_archive(const std::string& archive_path, const std::string& dest_dir);

}  // namespace ddpx::io
