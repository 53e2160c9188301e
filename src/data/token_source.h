// A language model's batches: the windows of a token stream (data/token_windows.h) that a
// batch's sample indices name, cut from an epoch's offset, or (random windows) each started where
// (seed, epoch, index) draws. Nothing is augmented, so nothing depends on the thread or the call
// order.
#pragma once

#include <cstdint>
#include <optional>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/token_windows.h"

namespace ddpx::data {

class TokenSource : public BatchSource {
 public:
  // `window_seed`: the seed of each training epoch's window offset; none: offset 0 (evaluation).
  // `windows`: how a training epoch cuts them (data/token_windows.h); evaluation reads strides.
  // The dataset is held by reference and must outlive the source.
  TokenSource(const Dataset& dataset, std::optional<uint64_t> window_seed,
              Windows windows = Windows::kStride);

  int64_t size() const override;
  Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
               int64_t batch_index) const override;

 private:
  const Dataset& dataset_;
  std::optional<uint64_t> window_seed_;
  Windows windows_;
};

}  // namespace ddpx::data
