// `ddpx data pack`: an image folder (torchvision's ImageFolder layout, data/image_folder.h)
// written as tar shards in WebDataset's layout for --dataset shards (data/shard_dataset.h). The
// samples are shuffled once (by --seed) so that every shard holds a mix of the classes, then
// written in that order as KEY.EXT (the file's bytes as they are, EXT its extension in lower case)
// and KEY.cls (the label in decimal), KEY the sample's number in the shards, zero-padded; a shard
// is closed before it would pass the size asked for (one sample a shard at least). The class
// names go to OUT/classes.txt. Atomically: the shards are written into a hidden folder in OUT,
// and only when all are whole do they replace OUT's shards of the same prefix. A validation
// folder packed with --prefix val takes the labels of OUT/classes.txt by class name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddpx::data {

struct PackOptions {
  std::string folder;   // the image folder
  std::string out_dir;  // where the shards go
  int64_t shard_bytes = int64_t{1} << 30;
  std::string prefix = "train";  // shards PREFIX-000000.tar, ...
  uint64_t seed = 0;
  int index_threads = 0;  // header readers (0: the cores)
};

struct PackResult {
  std::vector<std::string> shards;
  int64_t samples = 0;
  int64_t bytes = 0;  // of the shards
  int64_t classes = 0;
};

// Throws kData for an unreadable image (naming it) or a validation class OUT's classes lack.
PackResult pack_image_folder(const PackOptions& options);

// A size as `--shard_size` takes it: bytes, or a number with K, M or G (powers of 1024).
int64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace ddpx::data
