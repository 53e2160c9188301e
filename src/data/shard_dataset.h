// `--dataset shards`: a folder of tar shards in WebDataset's layout (io/tar_shard.h), as
// written by `ddpx data pack` (data/shard_pack.h), by webdataset's ShardWriter or by Python's
// tarfile. A sample is the members sharing a key (the member's name up to the first dot of its
// file name): one image (`.jpg`, `.png`, ... as ImageFolder's extensions) and its label, a
// `.cls` member holding the class number in decimal; other members are passed over. Training
// reads DATA_DIR/train-*.tar (or every *.tar when there is none); validation DATA_DIR/val-*.tar,
// else --val_dir's shards, else a --val_split share of the training samples held out (the same
// on every run). Class names come from DATA_DIR/classes.txt (a name a line, in label order)
// when present, else the labels are their own names. Shards are listed once at start (headers
// only); a sample's bytes are read in place when its batch is built, and transformed as an
// image folder's are (data/image_source.h). data/shard_sampler.h splits the shards over ranks.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace ddpx::data {

// The shards `--dataset shards` trains on in `dir`: DIR/PREFIX-*.tar sorted by name, where
// PREFIX is "train" (or, when there are none, every *.tar but val-*.tar) or "val".
std::vector<std::string> find_shards(const std::string& dir, const std::string& prefix);

// Lists the shards of both splits (the validation split's from spec.val_url when given); throws
// kData naming the shard and the sample for a sample without an image or a label, a label out of
// range, or a shard that cannot be read.
DatasetSplits load_shard_dataset(const DatasetSpec& spec, const std::string& data_dir);

// The same for `--data_url` (spec.data_url, data/shard_urls.h): the shards on an HTTP server,
// listed from the index beside each (SHARD.tar.idx, refused when absent), their class names
// from classes.txt beside the first when it is there; validated on --val_url's shards (on a
// server too, read the same way), --val_dir's local shards or a --val_split share. Samples are read
// with Range requests (data/http_range.h).
DatasetSplits load_shard_urls(const DatasetSpec& spec);

// The file of class names beside the shards.
inline constexpr const char* kShardClassesFile = "classes.txt";

}  // namespace ddpx::data
