#include "data/memory_source.h"

namespace ddpx::data {

MemorySource::MemorySource(const Dataset& dataset, TransformOptions transform, uint64_t seed,
                           bool per_sample_streams)
    : dataset_(dataset),
      transform_(std::move(transform)),
      seed_(seed),
      per_sample_streams_(per_sample_streams) {}

Batch MemorySource::gather(const int64_t* indices, int64_t count, int64_t epoch,
                           int64_t batch_index) const {
  auto idx = torch::from_blob(const_cast<int64_t*>(indices), {count}, torch::kInt64);
  Batch batch;
  if (per_sample_streams_) {
    std::vector<torch::Tensor> images;
    images.reserve(count);
    for (int64_t i = 0; i < count; ++i) {
      std::mt19937_64 rng = sample_stream(seed_, epoch, indices[i]);
      images.push_back(transform_batch(dataset_.images.narrow(0, indices[i], 1), transform_, rng));
    }
    batch.images = torch::cat(images);
  } else {
    std::mt19937_64 rng = batch_stream(seed_, epoch, batch_index);
    batch.images = transform_batch(dataset_.images.index_select(0, idx), transform_, rng);
  }
  batch.labels = dataset_.labels.index_select(0, idx);
  return batch;
}

}  // namespace ddpx::data
