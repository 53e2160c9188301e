// torchvision's ImageFolder layout, `root/<class>/**/<file>`: the classes are root's
// sub-folders sorted by name (symlinked ones too; hidden ones too), each class's files are
// found by walking its folder with symlinks followed (sorted by folder path, then by file name),
// and a file counts when its name ends in one of IMG_EXTENSIONS, compared in lower case. The
// same errors stand: a root with no class folder, and a class with no image file. A symlink that
// leads back to a folder it sits in (a loop, on which os.walk would never end) is refused.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ddpx::data {

// torchvision.datasets.folder.IMG_EXTENSIONS, in its order (its error message lists them so).
inline constexpr std::array<const char*, 9> kImageExtensions{
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

struct FolderListing {
  std::string root;
  std::vector<std::string> classes;  // sorted; a label is an index into this
  std::vector<std::string> paths;    // root/<class>/..., in ImageFolder's sample order
  std::vector<int64_t> labels;
};

// Lists `root` as torchvision's ImageFolder(root) does; throws kData for a missing root, no
// class folder, a class without images, or a symlink loop.
FolderListing list_image_folder(const std::string& root);

bool has_image_extension(const std::string& name);  // IMG_EXTENSIONS, case-insensitively

}  // namespace ddpx::data
