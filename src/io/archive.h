// Unpacking the official dataset archives (tar.gz) with libarchive. Only regular files and
// directories are written; absolute paths, `..` components, links and devices are refused, so
// an archive cannot write outside the destination.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddpx::io {

// What one archive may unpack to: CIFAR-100's is about 180 MB, so a bigger one is hostile.
constexpr int64_t kMaxExtractedBytes = int64_t{4} << 30;

// Unpacks `archive_path` into `dest_dir`. Entries land in a hidden staging folder first and
// are moved into place only when the whole archive was read, so a corrupt archive leaves no
// half-extracted dataset behind. Existing top-level entries are replaced. More than
// kMaxExtractedBytes of content is refused (a decompression bomb).
void extract_archive(const std::string& archive_path, const std::string& dest_dir);
// The same for an archive in memory (the fuzz entry point); `source` names it in errors.
void extract_archive_bytes(std::string_view bytes, const std::string& source,
                           const std::string& dest_dir, int64_t max_bytes = kMaxExtractedBytes);

}  // namespace ddpx::io
