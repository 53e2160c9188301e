// The batches of a streamed image folder: each sample's file is read and decoded when its batch
// is built (the decoded set never sits in memory), transformed alone by data/image_transforms.h
// (training RandomResizedCrop and flip, or evaluation Resize and CenterCrop; `fast` or `exact`
// decoding) from its own stream keyed by (seed, epoch, sample) into a (S, S, 3) uint8 image,
// then converted and normalised in one pass into its place in the (B, 3, S, S) float batch. A file
// that fails to read or decode stops the batch with one error naming it and the flag to skip it, or
// with BadImages::kSkip is replaced by the next sample of the set (so the batch keeps its size and
// every rank its batch count), named in one warning the first time and counted.
#pragma once

#include <mutex>
#include <set>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace ddpx::data {

class ImageSource : public BatchSource {
 public:
  // `dataset` must be streamed (dataset.files) and outlive the source; transform.image_size > 0.
  ImageSource(const Dataset& dataset, TransformOptions transform, uint64_t seed,
              BadImages bad_images = BadImages::kError);
  int64_t size() const override { return dataset_.size(); }
  Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
               int64_t batch_index) const override;
  // Each sample is read, decoded and transformed alone: any thread may build any of them.
  Batch gather_shared(const int64_t* indices, int64_t count, int64_t epoch, int64_t batch_index,
                      const PublishWork& publish) const override;

  // One sample's uint8 (S, S, 3) image after the transforms, from its stream `rng`.
  torch::Tensor sample(int64_t index, std::mt19937_64& rng) const;
  int64_t skipped() const;  // samples left out so far (BadImages::kSkip)

 private:
  // Sample i of a batch into its place: `used[i]` the sample (or its stand-in, after a skip),
  // `stream` its stream after the transforms (random erasing draws from it next).
  void build_sample(int64_t i, std::vector<int64_t>& used, std::mt19937_64& stream,
                    const torch::Tensor& images, int64_t epoch) const;
  const Dataset& dataset_;
  TransformOptions transform_;
  std::vector<float> mean_, std_;  // the normalisation's, per channel
  uint64_t seed_;
  BadImages bad_images_;
  mutable std::mutex skipped_mutex_;
  mutable std::set<int64_t> skipped_;
};

}  // namespace ddpx::data
