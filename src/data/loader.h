// A prefetching data loader. Background threads build batches from a BatchSource (an in-memory
// set, or an image folder decoded as batches are needed: data/batch_source.h) and queue them
// `prefetch` deep, so the training loop only waits when the model outruns the loader; and when
// it does wait for a batch whose samples can be built apart (an image folder's), the waiting
// thread builds some of them itself (data/sample_work.h) instead of sleeping.
// Deterministic: batch k of an epoch is built from a random stream seeded by (seed, epoch, k),
// whichever thread builds it; with `per_sample_streams` (the deterministic mode, and always for
// image folders) each sample is augmented alone from a stream seeded by (seed, epoch, sample
// index), so that it gets the same crop and flip whichever rank and batch it lands in. The
// dataset is held by reference and must outlive the loader. Errors raised while building a
// batch in a worker thread are rethrown by next().
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/token_windows.h"
#include "data/transforms.h"

namespace ddpx::data {

struct LoaderOptions {
  int64_t batch_size = 128;
  bool drop_last = false;
  int num_workers = 1;        // background threads building batches
  int prefetch = 4;           // ready batches kept ahead
  int64_t limit_batches = 0;  // 0 = all
  uint64_t seed = 0;
  bool pin_memory = false;          // page-locked batches, for non-blocking copies to a GPU
  bool per_sample_streams = false;  // augmentation keyed by the sample, not the batch (above)
  // Token windows: the seed of each epoch's window_offset() (the run's, equal on every rank, so
  // the ranks' windows together are one process's); none: offset 0 (evaluation).
  std::optional<uint64_t> window_seed;
  Windows windows = Windows::kStride;  // token windows: how a training epoch cuts them
  TransformOptions transform;
  BadImages bad_images = BadImages::kError;  // streamed sets: an image that fails to decode
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, LoaderOptions options);
  DataLoader(std::unique_ptr<BatchSource> source, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins an epoch over these sample indices (from a sampler); stops any epoch in flight.
  // `first_batch`: where a run resumed mid-epoch goes on; the batches from there are the ones
  // (samples and augmentation) the whole epoch would have had.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch = 0);
  // The next batch in order, or nullopt at the end of the epoch.
  std::optional<Batch> next();
  int64_t num_batches() const;  // in the current epoch

 private:
  void worker_loop();
  void stop_workers();
  Batch build_batch(int64_t batch_index, const PublishWork& publish) const;

  LoaderOptions options_;
  std::unique_ptr<BatchSource> source_;
  std::vector<int64_t> indices_;
  int64_t epoch_ = 0;
  int64_t num_batches_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::shared_ptr<SampleWork>> working_;  // batches a worker has under way
  int64_t next_to_build_ = 0;
  int64_t next_to_return_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::exception_ptr error_;
};

}  // namespace ddpx::data
