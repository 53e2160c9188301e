// The index of an image folder: torchvision's listing (data/image_folder.h) with each file's
// size in bytes, format and dimensions from its header, read by a pool of threads. It is cached
// in `root/.ddpx-index` under the listing's checksum (every file's path below root and every
// folder's modification time), so a second start on an unchanged folder reads the folders'
// entries and the cache, and no image nor any file's metadata: a file added, removed or renamed,
// or a class added or removed, rescans; a file rewritten in place under the same name keeps its
// cached record (its new bytes are read, and any error in them reported, when a batch needs it).
// A folder that cannot be written to is indexed on every start. Files whose header cannot be read
// are kept in the index with the reason, for `ddpx data info` to list and for training to refuse.
// Per file the index holds a 24-byte record and its path's bytes in one buffer: a 100k-image
// folder's costs a few MiB.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/image_folder.h"
#include "io/image.h"

namespace ddpx::data {

struct ImageRecord {
  int64_t bytes = 0;
  int32_t height = 0;
  int32_t width = 0;
  io::ImageFormat format = io::ImageFormat::kUnknown;
  bool readable = true;  // false: its header could not be read (ImageIndex::errors says why)
};

struct ImageIndex {
  FolderListing listing;
  std::vector<ImageRecord> records;      // one per listing.paths entry
  std::map<size_t, std::string> errors;  // file i's reason, for each record not readable
  bool from_cache = false;
  double seconds = 0;  // how long indexing took
};

// Lists and indexes `root` with `threads` readers (0: the machine's cores).
ImageIndex index_image_folder(const std::string& root, int threads = 0);

// The file the index is cached in.
std::string index_cache_path(const std::string& root);

// The cache file's bytes: the records of `count` files listed with `checksum` at `listed_at_ns`
// (the wall clock before the listing was read), or nullopt when they are another listing's,
// another version's or damaged, or when a folder changed less than a tenth of a second before
// that listing, or after it (a change in the same tick of the file system's coarse clock would
// leave the folder's time as it was: such a cache proves nothing, as git's "racily clean"
// entries): then the folder is rescanned.
std::optional<std::vector<ImageRecord>> parse_index_cache(std::string_view bytes, uint64_t count,
                                                          uint64_t checksum,
                                                          int64_t newest_change_ns);
std::string format_index_cache(const std::vector<ImageRecord>& records, uint64_t checksum,
                               int64_t listed_at_ns);

}  // namespace ddpx::data
