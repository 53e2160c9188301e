// An image classification dataset: held in memory as uint8, the way it is stored on disk (IDX,
// CIFAR python/binary, synthetic), or streamed (an image folder: its files, decoded as batches
// need them, data/image_dataset.h). Transforms turn batches of it into float tensors. A language
// model's data (--dataset tokens) is the same struct holding a token stream instead, whose
// samples are windows of it (data/token_windows.h).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::data {

struct ImageFiles;  // data/image_dataset.h
struct MaskedLm;    // data/masked_lm.h

struct Dataset {
  std::string name;      // "fashion-mnist", "cifar10", ...
  torch::Tensor images;  // (N, H, W, C) uint8, contiguous; undefined when streamed
  torch::Tensor labels;  // (N) int64, each in [0, num_classes)
  int64_t num_classes = 0;
  std::vector<std::string> class_names;  // may be empty
  // A streamed set: sample i is the file files->paths[i], read when a batch needs it.
  std::shared_ptr<const ImageFiles> files;
  int64_t median_height = 0, median_width = 0;  // a streamed set's images (they vary)
  // Token data instead of images: the stream (1-D int32) and the window's input length; a
  // sample is seq_len + 1 tokens (input the first seq_len, target the last), num_classes the
  // vocabulary. The "image size" of a sequence is its length.
  torch::Tensor tokens;
  int64_t seq_len = 0;
  // A masked-LM's windows (BERT): the target is the window's own tokens at masked positions.
  std::shared_ptr<const MaskedLm> masked_lm;

  bool streamed() const { return files != nullptr; }
  int64_t size() const;  // images, or token windows
  int64_t height() const {
    return tokens.defined() ? seq_len : streamed() ? median_height : images.size(1);
  }
  int64_t width() const {
    return tokens.defined() ? 1 : streamed() ? median_width : images.size(2);
  }
  int64_t channels() const { return tokens.defined() ? 1 : streamed() ? 3 : images.size(3); }
};

struct DatasetSplits {
  Dataset train;
  Dataset test;
  std::vector<float> mean;  // per channel in [0, 1], of the training split
  std::vector<float> std;   // per channel, of the training split
  std::string source;       // where they came from: the folder read, or "generated"
};

// The datasets ddpx reads (`--dataset`); a folder of files is one of these formats, named by
// --data_dir.
// imagefolder and imagenet are streamed image folders (data/image_dataset.h); shards WebDataset
// tar shards of images, streamed too (data/shard_dataset.h); tokens a language model's token
// files (data/token_windows.h).
enum class DatasetId {
  kFashionMnist,
  kMnist,
  kCifar10,
  kCifar100,
  kSynthetic,
  kImageFolder,
  kImagenet,
  kTokens,
  kShards
};
inline constexpr NameTable<DatasetId, 9> kDatasetNames{{{DatasetId::kFashionMnist, "fashion-mnist"},
                                                        {DatasetId::kMnist, "mnist"},
                                                        {DatasetId::kCifar10, "cifar10"},
                                                        {DatasetId::kCifar100, "cifar100"},
                                                        {DatasetId::kSynthetic, "synthetic"},
                                                        {DatasetId::kImageFolder, "imagefolder"},
                                                        {DatasetId::kImagenet, "imagenet"},
                                                        {DatasetId::kTokens, "tokens"},
                                                        {DatasetId::kShards, "shards"}}};
inline const char* name(DatasetId id) { return name_of(kDatasetNames, id); }

// What a streamed set does with an image it cannot read or decode (--bad_images): stop with one
// line naming it (error), or leave it out, counted and named once (skip).
enum class BadImages { kError, kSkip };
inline constexpr NameTable<BadImages, 2> kBadImagesNames{
    {{BadImages::kError, "error"}, {BadImages::kSkip, "skip"}}};
inline const char* name(BadImages b) { return name_of(kBadImagesNames, b); }

// What to load. data_dir empty means the dataset's default folder (default_data_dir()).
struct DatasetSpec {
  DatasetId dataset = DatasetId::kFashionMnist;
  std::string data_dir;
  // shards only: URLs of tar shards on an HTTP server, read in place of data_dir's (`--data_url`)
  std::string data_url;
  // shards only: URLs of the validation shards on an HTTP server (`--val_url`), in place of
  // val-*.tar beside the training shards, --val_dir or --val_split
  std::string val_url;
  // synthetic only
  int64_t synthetic_train_size = 2048;
  int64_t synthetic_test_size = 512;
  int64_t synthetic_height = 32;
  int64_t synthetic_width = 32;
  int64_t synthetic_channels = 3;
  int64_t synthetic_classes = 10;
  uint64_t seed = 0;
  // image folders only: the validation folder (imagefolder; imagenet's is DATA_DIR/val), else the
  // fraction of the training folder held out for validation
  std::string val_dir;
  double val_split = 0.1;
  // image folders and shards: false reads the training folder or shards alone, with an empty
  // test split (what `ddpx bench loader` times: one index, no validation set)
  bool with_validation = true;
  int index_threads = 0;                     // threads reading image headers (0: the cores)
  BadImages bad_images = BadImages::kError;  // files whose header cannot be read, at start
  // tokens only: the window's input length, and the vocabulary (0: the largest token + 1)
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  // tokens only: the model that trains with masked-LM on them (BERT; empty: next token)
  std::string masked_lm_model;
};

// Loads both splits; throws ddpx::Error(kData) naming the file and the download command
// when something is missing or corrupt.
DatasetSplits load_dataset(const DatasetSpec& spec);

// The folder read when --data_dir is not given: data/NAME; for CIFAR, data/NAME when it holds
// the set and else data itself, the original tool's layout (data/cifar-100-python/,
// data/cifar-10-batches-py/ or their .tar.gz beside them); for fashion-mnist, Debian's
// dataset-fashion-mnist files under /usr/share/datasets/fashion-mnist when installed.
std::string default_data_dir(DatasetId dataset);

// What a model sees of `spec`'s dataset without loading it: the native image height (= width)
// and the number of classes (the synthetic ones from the spec).
struct DatasetShape {
  int64_t image_size = 0;
  int64_t channels = 0;
  int64_t num_classes = 0;
};
DatasetShape dataset_shape(const DatasetSpec& spec);

// Per-channel mean and std of a uint8 (N, H, W, C) tensor, scaled to [0, 1].
void channel_stats(const torch::Tensor& images, std::vector<float>& mean, std::vector<float>& std);

}  // namespace ddpx::data
