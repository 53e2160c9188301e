// The batches of an in-memory set (MNIST, CIFAR, synthetic): the samples' uint8 bytes gathered
// by index and transformed together (data/transforms.h), with one random stream per batch, or
// per sample with `per_sample_streams` (the deterministic mode). The dataset is held by
// reference and must outlive the source.
#pragma once

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace ddpx::data {

class MemorySource : public BatchSource {
 public:
  MemorySource(const Dataset& dataset, TransformOptions transform, uint64_t seed,
               bool per_sample_streams);
  int64_t size() const override { return dataset_.size(); }
  Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
               int64_t batch_index) const override;

 private:
  const Dataset& dataset_;
  TransformOptions transform_;
  uint64_t seed_;
  bool per_sample_streams_;
};

}  // namespace ddpx::data
