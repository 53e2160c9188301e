// How `ddpx train`'s options become a dataset and its loaders: which dataset (or synthetic
// images), and per split the batch, threads, augmentations and normalization.
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "data/loader.h"
#include "train/options.h"

namespace ddpx::train {

data::DatasetSpec dataset_spec(const TrainOptions& options);

// The loader of the training split (`train`) or of the test split (no augmentation, the
// evaluation batch). `seed_stream` separates the ranks' random streams.
data::LoaderOptions loader_options(const TrainOptions& options, const data::DatasetSplits& splits,
                                   bool train, int64_t batch_size, uint64_t seed_stream,
                                   bool pin_memory);

}  // namespace ddpx::train
