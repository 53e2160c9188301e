#include "data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace ddpx::data {
namespace folder_detail {

struct Entry {
  std::string name;
  bool is_dir = false;  // after symlinks, as os.scandir's is_dir()
};

// os.scandir: the entries of `dir`, or nothing when it cannot be read (os.walk skips those).
std::vector<Entry> scan(const std::string& dir) {
  std::vector<Entry> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    Entry entry{e->d_name};
    if (e->d_type == DT_DIR) {
      entry.is_dir = true;
    } else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      entry.is_dir = stat((dir + "/" + entry.name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back(std::move(entry));
  }
  closedir(d);
  return out;
}

struct Folder {
  std::string path;
  int64_t mtime_ns = 0;
  std::vector<std::string> files;
};

// FNV-1a, the listing's checksum.
struct Checksum {
  uint64_t value = 1469598103934665603ull;
  void mix(const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      value ^= static_cast<const unsigned char*>(data)[i];
      value *= 1099511628211ull;
    }
  }
  void mix(std::string_view s) {
    mix(s.data(), s.size());
    mix("", 1);
  }
};

// os.walk(dir, followlinks=True), every folder with its files; `ancestors` are the (device,
// inode) of the folders above, so that a link back into them is a loop.
void walk(const std::string& dir, std::vector<std::pair<dev_t, ino_t>>& ancestors,
          std::vector<Folder>& out) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return;
  const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  DDPX_CHECK(std::find(ancestors.begin(), ancestors.end(), id) == ancestors.end(), ErrorKind::kData,
             "{}: a symlink loop (this folder is one of its own parents); torchvision's "
             "ImageFolder would walk it forever: remove the link",
             dir);
  ancestors.push_back(id);
  Folder folder{dir, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, {}};
  std::vector<std::string> subdirs;
  for (auto& e : scan(dir)) (e.is_dir ? subdirs : folder.files).push_back(std::move(e.name));
  out.push_back(std::move(folder));
  for (const auto& sub : subdirs) walk(dir + "/" + sub, ancestors, out);
  ancestors.pop_back();
}

}  // namespace folder_detail

bool has_image_extension(std::string_view name) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (const char* ext : kImageExtensions) {
    const size_t n = std::strlen(ext);
    if (name.size() < n) continue;
    size_t k = 0;
    while (k < n && lower(name[name.size() - n + k]) == ext[k]) ++k;
    if (k == n) return true;
  }
  return false;
}

FolderListing list_image_folder(const std::string& given_root) {
  std::string root = given_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  DDPX_CHECK(stat(root.c_str(), &st) == 0 && S_ISDIR(st.st_mode), ErrorKind::kData,
             "{}: no such folder; --data_dir names a folder of class folders (root/<class>/*.jpg)",
             root);
  FolderListing listing;
  listing.root = root;
  listing.paths = PathList(root);
  folder_detail::Checksum checksum;
  for (const auto& e : folder_detail::scan(root))
    if (e.is_dir) listing.classes.push_back(e.name);
  std::sort(listing.classes.begin(), listing.classes.end());
  DDPX_CHECK(!listing.classes.empty(), ErrorKind::kData,
             "Couldn't find any class folder in {}. (An image folder holds one sub-folder per "
             "class: root/<class>/*.jpg)",
             root);
  std::vector<std::string> empty;
  for (size_t label = 0; label < listing.classes.size(); ++label) {
    std::vector<folder_detail::Folder> folders;
    std::vector<std::pair<dev_t, ino_t>> ancestors;
    folder_detail::walk(root + "/" + listing.classes[label], ancestors, folders);
    // sorted(os.walk(...)): by folder path, then by file name.
    std::sort(folders.begin(), folders.end(),
              [](const folder_detail::Folder& a, const folder_detail::Folder& b) {
                return a.path < b.path;
              });
    const size_t before = listing.paths.size();
    std::string relative;
    for (auto& folder : folders) {
      const std::string_view below = std::string_view(folder.path).substr(root.size() + 1);
      checksum.mix(below);
      checksum.mix(&folder.mtime_ns, sizeof(folder.mtime_ns));
      listing.newest_change_ns = std::max(listing.newest_change_ns, folder.mtime_ns);
      std::sort(folder.files.begin(), folder.files.end());
      for (const auto& file : folder.files) {
        if (!has_image_extension(file)) continue;
        relative.assign(below).append(1, '/').append(file);
        checksum.mix(relative);
        listing.paths.push_back(relative);
        listing.labels.push_back(static_cast<int32_t>(label));
      }
    }
    if (listing.paths.size() == before) empty.push_back(listing.classes[label]);
  }
  listing.paths.shrink_to_fit();
  listing.labels.shrink_to_fit();
  listing.checksum = checksum.value;
  if (!empty.empty()) {
    std::string classes, extensions;
    for (const auto& c : empty) classes += (classes.empty() ? "" : ", ") + c;
    for (const char* e : kImageExtensions)
      extensions += (extensions.empty() ? "" : ", ") + std::string(e);
    fail(ErrorKind::kData,
         "{}: Found no valid file for the classes {}. Supported extensions are: {}", root, classes,
         extensions);
  }
  return listing;
}

}  // namespace ddpx::data
