// The index of an image folder: torchvision's listing (data/image_folder.h) with each file's
// size in bytes, format and dimensions from its header, read by a pool of threads. It is cached
// in `root/.ddpx-index` under a checksum of the listing (every path, size and modification
// time), so a second start on an unchanged folder reads no image; any change (a file added,
// removed, rewritten or touched) rescans. A folder that cannot be written to is indexed on every
// start. Files whose header cannot be read are kept in the index with the reason, for
// `ddpx data info` to list and for training to refuse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/image_folder.h"
#include "io/image.h"

namespace ddpx::data {

struct ImageRecord {
  int64_t bytes = 0;
  int64_t height = 0;
  int64_t width = 0;
  io::ImageFormat format = io::ImageFormat::kUnknown;
  std::string error;  // why the header could not be read; empty when it could
};

struct ImageIndex {
  FolderListing listing;
  std::vector<ImageRecord> records;  // one per listing.paths entry
  bool from_cache = false;
  double seconds = 0;  // how long indexing took
};

// Lists and indexes `root` with `threads` readers (0: the machine's cores).
ImageIndex index_image_folder(const std::string& root, int threads = 0);

// The file the index is cached in.
std::string index_cache_path(const std::string& root);

// The cache file's bytes: the records of `count` files listed with `checksum`, or nullopt when
// they are another listing's, another version's or damaged (then the folder is rescanned).
std::optional<std::vector<ImageRecord>> parse_index_cache(std::string_view bytes, uint64_t count,
                                                          uint64_t checksum);
std::string format_index_cache(const std::vector<ImageRecord>& records, uint64_t checksum);

}  // namespace ddpx::data
