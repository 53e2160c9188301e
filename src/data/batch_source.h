// What a DataLoader gathers its batches from: an in-memory set (data/memory_source.h), a
// streamed one whose samples are read and decoded as the batch needs them (an image folder,
// data/image_source.h), or a token stream cut into windows (data/token_source.h). The loader
// owns the order (the sampler's indices), the threads and the prefetch; a source turns a batch's
// sample indices into a ready batch (float images, or token windows). gather() is called
// from several loader threads at once and must not depend on which thread or which call order:
// its random draws come from the streams below, keyed by (seed, epoch, batch) or
// (seed, epoch, sample) only.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>

#include "data/sample_work.h"

namespace ddpx::data {

struct Batch {
  torch::Tensor images;  // (B, C, H, W) float32; token windows: the inputs (B, T) int64
  torch::Tensor labels;  // (B) int64; token windows: the targets (B, T) int64
  int64_t size() const { return labels.size(0); }
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t size() const = 0;  // samples
  // The batch of samples indices[0..count), the `batch_index`-th of `epoch`.
  virtual Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
                       int64_t batch_index) const = 0;
  // The same batch, whose samples other threads may help build: a source that builds its
  // samples alone hands `publish` the batch's SampleWork (sample_work.h) before it starts on
  // them. By default, gather() with nothing to share.
  virtual Batch gather_shared(const int64_t* indices, int64_t count, int64_t epoch,
                              int64_t batch_index, const PublishWork& publish) const {
    return gather(indices, count, epoch, batch_index);
  }
};

// The augmentation stream of batch k of an epoch (the in-memory sets' default).
std::mt19937_64 batch_stream(uint64_t seed, uint64_t epoch, uint64_t batch);
// The stream of one sample in an epoch: the same crop and flip whichever batch, thread or rank
// the sample lands in.
std::mt19937_64 sample_stream(uint64_t seed, uint64_t epoch, uint64_t sample);

}  // namespace ddpx::data
