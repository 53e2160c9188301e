// `--dataset imagefolder` and `--dataset imagenet`: a training and a validation image folder
// (torchvision's ImageFolder layout, data/image_folder.h) as streamed Datasets whose samples are
// files, decoded when a batch needs them (data/image_source.h). imagefolder: DATA_DIR, validated
// on --val_dir or else on a --val_split fraction of DATA_DIR held out (the same files on every
// run, whatever the seed); imagenet: DATA_DIR/train and DATA_DIR/val (or --val_dir). The
// validation folder's classes take the training folder's labels by name, so a class missing from
// it shifts nothing. Normalised with ImageNet's mean and std.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_index.h"
#include "data/path_list.h"

namespace ddpx::data {

// A streamed split's files (Dataset::files): an image folder's, one file a sample, or tar
// shards' (data/shard_dataset.h), where sample i is a member of the shard paths[i].
struct ImageFiles {
  std::string root;
  PathList paths;  // a folder's below root; a shard's (each sample's shard file or URL) in full
  bool index_cached = false;  // a folder's index was read from its cache (data/image_index.h)
  double index_seconds = 0;   // the time listing and indexing (or reading the cache) took
  // Shards only (empty for a folder): sample i is records[i].bytes bytes at offsets[i] of
  // paths[i], the member members[i], of the shard numbered shards[i] (the sampler's unit).
  std::vector<ImageRecord> records;
  std::vector<int64_t> offsets;
  std::vector<std::string> members;
  std::vector<int32_t> shards;

  bool sharded() const { return !offsets.empty(); }
  std::string read(int64_t i) const;  // sample i's encoded image
  std::string name(int64_t i) const;  // what errors call it: the file, or SHARD.tar:MEMBER
};

// Indexes both folders (through the cache) and refuses unreadable files, naming the first.
DatasetSplits load_image_folder_dataset(const DatasetSpec& spec, const std::string& data_dir);

// The training folder's class count, from its folder names only (no file is read).
int64_t image_folder_classes(const DatasetSpec& spec, const std::string& data_dir);

// The training folder of `spec` (DATA_DIR, or DATA_DIR/train for imagenet).
std::string image_train_root(const DatasetSpec& spec, const std::string& data_dir);

}  // namespace ddpx::data
