#include "data/image_source.h"

#include "core/error.h"
#include "core/log.h"
#include "data/http_range.h"
#include "data/image_dataset.h"
#include "data/image_transforms.h"
#include "io/image.h"

namespace ddpx::data {

ImageSource::ImageSource(const Dataset& dataset, TransformOptions transform, uint64_t seed,
                         BadImages bad_images)
    : dataset_(dataset), transform_(std::move(transform)), seed_(seed), bad_images_(bad_images) {
  DDPX_CHECK(dataset_.streamed() && transform_.image_size > 0, ErrorKind::kInternal,
             "ImageSource needs a streamed dataset and an output size (got {})",
             transform_.image_size);
  normalization(transform_, 3, mean_, std_);
}

torch::Tensor ImageSource::sample(int64_t index, std::mt19937_64& rng) const {
  const std::string bytes = dataset_.files->read(index);
  const std::string source = dataset_.files->name(index);
  const int64_t size = transform_.image_size;
  const bool train = transform_.random_resized_crop, flip = transform_.horizontal_flip;
  if (transform_.decode == ImageDecode::kFast)
    return train ? train_image_transform_fast(bytes, source, size, flip, rng)
                 : eval_image_transform_fast(bytes, source, size, transform_.crop_pct);
  const torch::Tensor image = io::decode_image(bytes, source);
  return train ? train_image_transform(image, size, flip, rng)
               : eval_image_transform(image, size, transform_.crop_pct);
}

int64_t ImageSource::skipped() const {
  std::lock_guard<std::mutex> lock(skipped_mutex_);
  return static_cast<int64_t>(skipped_.size());
}

void ImageSource::build_sample(int64_t i, std::vector<int64_t>& used, std::mt19937_64& stream,
                               const torch::Tensor& images, int64_t epoch) const {
  const int64_t size = transform_.image_size;
  torch::Tensor one;
  for (int64_t tries = 0;; ++tries) {
    stream = sample_stream(seed_, epoch, used[i]);
    try {
      one = sample(used[i], stream).contiguous();
      break;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kData && e.kind() != ErrorKind::kIo) throw;
      // A shard server's failure (data/http_range.h names the URL itself, where a bad image
      // is URL:MEMBER) is no image's fault: skipping would try every other sample in turn.
      const std::string& path = dataset_.files->paths[used[i]];
      if (is_url(path) && std::string(e.what()).rfind(path + ": ", 0) == 0) throw;
      DDPX_CHECK(bad_images_ == BadImages::kSkip, e.kind(),
                 "{} (or pass --bad_images skip to leave such files out)", e.what());
      bool first = false;
      int64_t total = 0;
      {
        std::lock_guard<std::mutex> lock(skipped_mutex_);
        first = skipped_.insert(used[i]).second;
        total = static_cast<int64_t>(skipped_.size());
      }
      if (first) log::warn("skipped ({} so far, --bad_images skip): {}", total, e.what());
      DDPX_CHECK(tries < dataset_.size(), ErrorKind::kData,
                 "no image of the {} in {} can be read; the last: {}", dataset_.size(),
                 dataset_.files->root, e.what());
      used[i] = (used[i] + 1) % dataset_.size();  // the next sample stands in
    }
  }
  normalize_into(one.data_ptr<uint8_t>(), size, size, mean_.data(), std_.data(),
                 images.data_ptr<float>() + i * 3 * size * size);
}

Batch ImageSource::gather(const int64_t* indices, int64_t count, int64_t epoch,
                          int64_t batch_index) const {
  return gather_shared(indices, count, epoch, batch_index, nullptr);
}

Batch ImageSource::gather_shared(const int64_t* indices, int64_t count, int64_t epoch,
                                 int64_t /*batch_index*/, const PublishWork& publish) const {
  const int64_t size = transform_.image_size;
  // images: (B, 3, S, S) float, each sample decoded, transformed on uint8 from its own stream,
  // then converted and normalised straight into its place, by whichever thread takes it
  auto images = torch::empty({count, 3, size, size}, torch::kFloat32);
  std::vector<std::mt19937_64> streams(static_cast<size_t>(count));
  std::vector<int64_t> used(indices, indices + count);  // a skipped sample's replacement
  auto work = std::make_shared<SampleWork>(count, [&](int64_t i) {
    build_sample(i, used, streams[static_cast<size_t>(i)], images, epoch);
  });
  if (publish) publish(work);
  work->finish();  // every sample built, by this thread or a helper; a helper's error rethrown
  Batch batch;
  batch.images = images;
  if (transform_.random_erasing.probability > 0)
    for (int64_t i = 0; i < count; ++i) {
      auto one = batch.images.narrow(0, i, 1);
      random_erase_(one, transform_.random_erasing, streams[static_cast<size_t>(i)]);
    }
  auto idx = torch::from_blob(used.data(), {count}, torch::kInt64);
  batch.labels = dataset_.labels.index_select(0, idx);
  return batch;
}

}  // namespace ddpx::data
