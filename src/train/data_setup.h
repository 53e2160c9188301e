// How `ddpx train`'s options become a dataset and its loaders: which dataset (or synthetic
// images), and per split the batch, threads, augmentations and normalization.
#pragma once

#include <cstdint>
#include <memory>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "train/options.h"

namespace ddpx::train {

data::DatasetSpec dataset_spec(const TrainOptions& options);

// The loader of the training split (`train`) or of the test split (no augmentation, the
// evaluation batch). `seed_stream` separates the ranks' random streams.
data::LoaderOptions loader_options(const TrainOptions& options, const data::DatasetSplits& splits,
                                   bool train, int64_t batch_size, uint64_t seed_stream,
                                   bool pin_memory);

// A rank's data for a run: every rank reads the dataset; the sampler gives each rank its shard.
// The loaders hold references into `splits`, so it never moves (made on the heap).
struct TrainData {
  data::DatasetSplits splits;
  int64_t image_size = 0;  // the model's input (--image_size, or the dataset's)
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<data::DataLoader> train_loader, test_loader;
  int64_t steps_per_epoch = 0;  // micro-batches (--limit_train_batches applied)
};
std::unique_ptr<TrainData> make_train_data(const TrainOptions& options, int rank, int world_size,
                                           int64_t batch_size, bool pin_memory);

}  // namespace ddpx::train
