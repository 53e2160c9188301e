#include "train/data_setup.h"

#include <algorithm>

#include "core/error.h"
#include "data/image_dataset.h"
#include "data/shard_sampler.h"
#include "data/transforms.h"
#include "distributed/threads.h"
#include "models/zoo/registry.h"

namespace ddpx::train {

data::DatasetSpec dataset_spec(const TrainOptions& o) {
  data::DatasetSpec spec;
  spec.dataset = o.dataset;
  spec.data_dir = o.data_dir;
  spec.data_url = o.data_url;
  spec.val_url = o.val_url;
  spec.val_dir = o.val_dir;
  spec.val_split = o.val_split;
  spec.bad_images = o.bad_images;
  spec.synthetic_train_size = o.synthetic_size;
  spec.synthetic_test_size = std::max<int64_t>(o.synthetic_size / 4, 1);
  spec.synthetic_height = spec.synthetic_width = o.synthetic_image;
  spec.synthetic_classes = o.synthetic_classes;
  spec.seed = o.seed;
  // A language model reads windows of its whole context unless told otherwise.
  spec.seq_len = o.seq_len > 0 ? o.seq_len : models::find_model(o.model).default_image_size;
  spec.vocab_size = o.vocab_size;
  if (models::find_model(o.model).family == "bert") spec.masked_lm_model = o.model;
  return spec;
}

int64_t native_size(const TrainOptions& o, const data::Dataset& d) {
  return d.streamed() ? models::find_model(o.model).default_image_size : d.height();
}

InputSize input_size(const TrainOptions& o, int64_t native) {
  const models::ModelInfo& model = models::find_model(o.model);
  if (o.image_size == kModelImageSize) {
    const int64_t size = model.default_image_size;
    if (size == native) return {size, ""};
    return {size, fmt::format("{}'s input size (--image_size model)", o.model)};
  }
  if (o.image_size > 0) {
    const int64_t fitted = models::fit_image_size(model, o.image_size);
    DDPX_CHECK(fitted == o.image_size, ErrorKind::kUsage,
               "--image_size {}: {}; give --image_size {}, or leave it out to have it chosen",
               o.image_size, models::image_size_rule(model), fitted);
    return {o.image_size, ""};
  }
  const int64_t fitted = models::fit_image_size(model, native);
  if (fitted == native) return {native, ""};
  return {fitted,
          fmt::format("{} (--image_size N to choose another)", models::image_size_rule(model))};
}

int loader_workers(const TrainOptions& o) {
  if (o.loader_workers > 0) return o.loader_workers;
  return std::min(dist::cores_per_local_rank(), kMaxAutoLoaderWorkers);
}

data::LoaderOptions loader_options(const TrainOptions& o, const data::DatasetSplits& splits,
                                   bool train, int64_t batch_size, int64_t image_size,
                                   uint64_t seed_stream, bool pin_memory) {
  data::LoaderOptions l;
  l.batch_size = batch_size;
  l.num_workers = loader_workers(o);
  l.limit_batches = train ? o.limit_train_batches : o.limit_test_batches;
  l.seed = o.seed * 1000003ULL + seed_stream;
  l.pin_memory = pin_memory;
  l.bad_images = o.bad_images;
  l.transform.random_crop = train && o.random_crop;
  l.transform.horizontal_flip = train && o.horizontal_flip;
  l.transform.image_size = image_size;
  l.transform.out_channels = 3;
  l.transform.normalize = o.normalize;
  l.transform.dataset_mean = splits.mean;
  l.transform.dataset_std = splits.std;
  l.transform.random_erasing.probability = train ? o.random_erasing : 0.0;
  l.transform.random_resized_crop = train;  // image folders only (data/image_source.h)
  l.transform.decode = o.decode;
  if (train) l.window_seed = o.seed;  // token windows: each epoch's cut, the same on every rank
  if (train) l.windows = o.windows;
  return l;
}

std::unique_ptr<TrainData> make_train_data(const TrainOptions& o, int rank, int world_size,
                                           int64_t batch_size, bool pin_memory) {
  auto owned = std::make_unique<TrainData>();
  TrainData& d = *owned;
  d.splits = data::load_dataset(dataset_spec(o));
  d.image_size = input_size(o, native_size(o, d.splits.train)).size;
  data::SamplerOptions sampler;
  sampler.rank = rank;
  sampler.world_size = world_size;
  sampler.seed = o.seed;
  // --deterministic: each rank a contiguous run of every global batch, and augmentation keyed
  // by the sample, so that a global batch is the same on any world size.
  if (o.deterministic) sampler.block = batch_size;
  if (const auto& files = d.splits.train.files; files && files->sharded()) {
    auto shards = std::make_unique<data::ShardSampler>(files->shards, sampler);
    d.sampler_note = shards->describe();
    d.sampler = std::move(shards);
  } else {
    d.sampler = std::make_unique<data::DistributedSampler>(d.splits.train.size(), sampler);
  }
  const auto stream = o.deterministic ? uint64_t{0} : static_cast<uint64_t>(rank);
  auto train_options =
      loader_options(o, d.splits, true, batch_size, d.image_size, stream, pin_memory);
  train_options.per_sample_streams = o.deterministic;
  d.train_loader = std::make_unique<data::DataLoader>(d.splits.train, train_options);
  d.test_loader = std::make_unique<data::DataLoader>(
      d.splits.test,
      loader_options(o, d.splits, false, o.eval_batch_size, d.image_size, stream, pin_memory));
  d.steps_per_epoch = (d.sampler->num_samples() + batch_size - 1) / batch_size;
  if (o.limit_train_batches > 0)
    d.steps_per_epoch = std::min(d.steps_per_epoch, o.limit_train_batches);
  return owned;
}

}  // namespace ddpx::train
