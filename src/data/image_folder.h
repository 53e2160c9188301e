// torchvision's ImageFolder layout, `root/<class>/**/<file>`: the classes are root's
// sub-folders sorted by name (symlinked ones too; hidden ones too), each class's files are
// found by walking its folder with symlinks followed (sorted by folder path, then by file name),
// and a file counts when its name ends in one of IMG_EXTENSIONS, compared in lower case. The
// same errors stand: a root with no class folder, and a class with no image file. A symlink that
// leads back to a folder it sits in (a loop, on which os.walk would never end) is refused.
// The listing is held compactly (data/path_list.h) and carries a checksum of itself: what the
// index cache (data/image_index.h) compares to know that the folder is unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/path_list.h"

namespace ddpx::data {

// torchvision.datasets.folder.IMG_EXTENSIONS, in its order (its error message lists them so).
inline constexpr std::array<const char*, 9> kImageExtensions{
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

struct FolderListing {
  std::string root;
  std::vector<std::string> classes;  // sorted; a label is an index into this
  PathList paths;                    // root/<class>/..., in ImageFolder's sample order
  std::vector<int32_t> labels;       // one per path
  // FNV-1a over every file's path below root and every folder's modification time below root
  // (not root's own, which the index cache's writing changes): a file added, removed or renamed,
  // or a class added or removed, changes it; a file rewritten in place under its name does not.
  uint64_t checksum = 0;
  int64_t newest_change_ns = 0;  // the latest modification time of those folders (ns since 1970)
};

// Lists `root` as torchvision's ImageFolder(root) does; throws kData for a missing root, no
// class folder, a class without images, or a symlink loop.
FolderListing list_image_folder(const std::string& root);

bool has_image_extension(std::string_view name);  // IMG_EXTENSIONS, case-insensitively

}  // namespace ddpx::data
