#include "data/image_source.h"

#include <cstring>

#include "core/error.h"
#include "data/image_dataset.h"
#include "data/image_transforms.h"
#include "io/image.h"

namespace ddpx::data {

ImageSource::ImageSource(const Dataset& dataset, TransformOptions transform, uint64_t seed)
    : dataset_(dataset), transform_(std::move(transform)), seed_(seed) {
  DDPX_CHECK(dataset_.streamed() && transform_.image_size > 0, ErrorKind::kInternal,
             "ImageSource needs a streamed dataset and an output size (got {})",
             transform_.image_size);
  to_float_ = transform_;
  to_float_.random_crop = false;
  to_float_.horizontal_flip = false;
  to_float_.image_size = 0;
  to_float_.out_channels = 3;
  to_float_.random_erasing.probability = 0;  // per sample below
}

torch::Tensor ImageSource::sample(int64_t index, std::mt19937_64& rng) const {
  const torch::Tensor image =
      io::decode_image(dataset_.files->read(index), dataset_.files->name(index));
  const int64_t size = transform_.image_size;
  if (transform_.random_resized_crop)
    return train_image_transform(image, size, transform_.horizontal_flip, rng);
  return eval_image_transform(image, size, transform_.crop_pct);
}

Batch ImageSource::gather(const int64_t* indices, int64_t count, int64_t epoch,
                          int64_t batch_index) const {
  const int64_t size = transform_.image_size;
  // images: (B, S, S, 3) uint8, each sample from its own stream
  auto images = torch::empty({count, size, size, 3}, torch::kUInt8);
  std::vector<std::mt19937_64> streams;
  streams.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    streams.push_back(sample_stream(seed_, epoch, indices[i]));
    const torch::Tensor one = sample(indices[i], streams.back()).contiguous();
    std::memcpy(images[i].data_ptr<uint8_t>(), one.data_ptr<uint8_t>(), size * size * 3);
  }
  Batch batch;
  std::mt19937_64 unused(0);  // to_float_ draws nothing
  batch.images = transform_batch(images, to_float_, unused);
  if (transform_.random_erasing.probability > 0)
    for (int64_t i = 0; i < count; ++i) {
      auto one = batch.images.narrow(0, i, 1);
      random_erase_(one, transform_.random_erasing, streams[i]);
    }
  auto idx = torch::from_blob(const_cast<int64_t*>(indices), {count}, torch::kInt64);
  batch.labels = dataset_.labels.index_select(0, idx);
  return batch;
}

}  // namespace ddpx::data
