// The batches of a streamed image folder: each sample's file is read and decoded when its batch
// is built (the decoded set never sits in memory), transformed alone by data/image_transforms.h
// (training RandomResizedCrop and flip, or evaluation Resize and CenterCrop) from its own stream
// keyed by (seed, epoch, sample), gathered into a (B, S, S, 3) uint8 batch, then turned into
// normalised float (B, 3, S, S) by data/transforms.h. A file that fails to read or decode stops
// the batch with one error naming it.
#pragma once

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace ddpx::data {

class ImageSource : public BatchSource {
 public:
  // `dataset` must be streamed (dataset.files) and outlive the source; transform.image_size > 0.
  ImageSource(const Dataset& dataset, TransformOptions transform, uint64_t seed);
  int64_t size() const override { return dataset_.size(); }
  Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
               int64_t batch_index) const override;

  // One sample's uint8 (S, S, 3) image after the transforms, from its stream `rng`.
  torch::Tensor sample(int64_t index, std::mt19937_64& rng) const;

 private:
  const Dataset& dataset_;
  TransformOptions transform_;
  TransformOptions to_float_;  // the conversion and normalisation only
  uint64_t seed_;
};

}  // namespace ddpx::data
