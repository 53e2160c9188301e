// How `ddpx train`'s options become a dataset and its loaders: which dataset (or synthetic
// images), the input size the model sees, how many loader threads, and per split the batch,
// augmentations and normalization.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "train/options.h"

namespace ddpx::train {

data::DatasetSpec dataset_spec(const TrainOptions& options);

// The square side the model sees, and why when it is not the one asked for:
// --image_size N as given (a usage error when the model cannot take N); --image_size model
// (kModelImageSize): the model's own input size (224 for the ResNets, as the original trains);
// otherwise the dataset's `native` size, resized up to the nearest size the model takes (28 px
// becomes 32 for vit_b_16's 16-px patches, and for VGG).
struct InputSize {
  int64_t size = 0;
  std::string reason;  // "" when the images keep their size
};
InputSize input_size(const TrainOptions& options, int64_t native);
// The `native` size of a dataset: its images' for an in-memory set; the model's own input size
// for an image folder, whose images vary.
int64_t native_size(const TrainOptions& options, const data::Dataset& dataset);

// Loader threads: --loader_workers, else (0) chosen from the cores each rank on this host has
// (`Auto-detected num_workers: N`, as the original prints), at most kMaxAutoLoaderWorkers.
inline constexpr int kMaxAutoLoaderWorkers = 8;
int loader_workers(const TrainOptions& options);

// The loader of the training split (`train`) or of the test split (no augmentation, the
// evaluation batch), at `image_size`. `seed_stream` separates the ranks' random streams.
data::LoaderOptions loader_options(const TrainOptions& options, const data::DatasetSplits& splits,
                                   bool train, int64_t batch_size, int64_t image_size,
                                   uint64_t seed_stream, bool pin_memory);

// A rank's data for a run: every rank reads the dataset; the sampler gives each rank its shard.
// The loaders hold references into `splits`, so it never moves (made on the heap).
struct TrainData {
  data::DatasetSplits splits;
  int64_t image_size = 0;                  // the model's input (input_size())
  std::unique_ptr<data::Sampler> sampler;  // a ShardSampler for tar shards
  std::string sampler_note;                // a line for the start-up lines, or ""

  std::unique_ptr<data::DataLoader> train_loader, test_loader;
  int64_t steps_per_epoch = 0;  // micro-batches (--limit_train_batches applied)
};
std::unique_ptr<TrainData> make_train_data(const TrainOptions& options, int rank, int world_size,
                                           int64_t batch_size, bool pin_memory);

}  // namespace ddpx::train
